"""ApiVersions 4, Metadata 13 (and v0's empty topic list), ListOffsets 8-10,
DescribeCluster 2 and FindCoordinator 6 over real sockets against a broker process."""

from __future__ import annotations

import pytest

from data_plane.protocol.errors import ErrorCode as E
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_wire import METADATA, RawClient

pytestmark = pytest.mark.django_db

LIST_OFFSETS, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER = 2, 10, 18, 60


def logged_in(kafka) -> RawClient:
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    return client


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_at_every_version(kafka, version):
    from kafka.protocol.metadata import ApiVersionsResponse

    client = RawClient(kafka)
    body = {"client_software_name": "raw-test", "client_software_version": "1.0"}
    answer = client.request(API_VERSIONS, version, body)
    assert answer["error_code"] == E.NONE
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}
    assert ranges[API_VERSIONS] == (0, 4)
    assert ranges[METADATA] == (0, 13)
    assert ranges[LIST_OFFSETS] == (0, 10)
    assert ranges[DESCRIBE_CLUSTER] == (0, 2)
    assert ranges[FIND_COORDINATOR] == (0, 6)
    # kafka-python reads the same answer: transaction.version (transactions V2) finalized
    # at 2 from v3, and supported (0-2) from v4 only, as Kafka 4 answers (KAFKA-17011).
    client.send_request(API_VERSIONS, version, body)
    raw = client._recv(int.from_bytes(client._recv(4), "big"))
    theirs = ApiVersionsResponse.decode(raw[4:], version=version)
    assert {k.api_key: k.max_version for k in theirs.api_keys}[API_VERSIONS] == 4
    if version >= 3:
        finalized = [
            (f.name, f.min_version_level, f.max_version_level) for f in theirs.finalized_features
        ]
        assert finalized == [("transaction.version", 2, 2)]
        assert theirs.finalized_features_epoch > 0
        supported = [(f.name, f.min_version, f.max_version) for f in theirs.supported_features]
        assert supported == ([("transaction.version", 0, 2)] if version >= 4 else [])
    # The connection goes on to sign in and ask for metadata as usual.
    client.login(kafka.admin_a)
    assert client.request(METADATA, 13, {"topics": None})["brokers"]
    client.close()


def test_metadata_v0_empty_list_is_all_topics_and_v13_has_a_top_level_error(kafka):
    name = topic_name("md")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = logged_in(kafka)
    v0 = client.request(METADATA, 0, {"topics": []})
    assert name in {t["name"] for t in v0["topics"]}
    for version in (1, 4, 12, 13):
        body = {"topics": [], "allow_auto_topic_creation": False}
        assert client.request(METADATA, version, body)["topics"] == []
    v13 = client.request(METADATA, 13, {"topics": None, "allow_auto_topic_creation": False})
    assert v13["error_code"] == E.NONE
    assert name in {t["name"] for t in v13["topics"]}
    client.close()


def test_list_offsets_special_timestamps_v8_to_v10(kafka):
    from confluent_kafka import Producer

    name = topic_name("lo")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for i in range(3):
        producer.produce(name, value=b"v%d" % i, partition=0)
    assert producer.flush(20) == 0
    client = logged_in(kafka)

    def ask(version: int, timestamp: int) -> tuple[int, int, int]:
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                    ],
                }
            ],
            "timeout_ms": 3000,
        }
        [part] = client.request(LIST_OFFSETS, version, body)["topics"][0]["partitions"]
        return part["error_code"], part["offset"], part["timestamp"]

    assert ask(7, -4)[0] == E.UNSUPPORTED_VERSION
    assert ask(8, -5)[0] == E.UNSUPPORTED_VERSION
    for version in (8, 9, 10):
        assert ask(version, -1) == (E.NONE, 3, -1)
        assert ask(version, -2) == (E.NONE, 0, -1)
        assert ask(version, -4) == (E.NONE, 0, -1)  # EARLIEST_LOCAL: the log start
    for version in (9, 10):
        assert ask(version, -5) == (E.NONE, -1, -1)  # LATEST_TIERED: nothing tiered
    client.close()


def test_describe_cluster_v2_and_find_coordinator_v6(kafka):
    client = logged_in(kafka)
    body = {
        "include_cluster_authorized_operations": False,
        "endpoint_type": 1,
        "include_fenced_brokers": True,
    }
    cluster = client.request(DESCRIBE_CLUSTER, 2, body)
    assert cluster["error_code"] == E.NONE and cluster["brokers"]
    assert all(b["is_fenced"] is False for b in cluster["brokers"])
    assert kafka.port in {b["port"] for b in cluster["brokers"]}

    def find(key_type: int, key: str) -> dict:
        answer = client.request(
            FIND_COORDINATOR, 6, {"key_type": key_type, "coordinator_keys": [key]}
        )
        [one] = answer["coordinators"]
        return one

    group = find(0, "g-" + topic_name())
    assert (group["error_code"], group["port"]) == (E.NONE, kafka.port)
    txn = find(1, "txn")  # the tenant's admin may describe every transactional id
    assert (txn["error_code"], txn["port"]) == (E.NONE, kafka.port)
    assert find(2, "g:AAAAAAAAAAAAAAAAAAAAAA:0")["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    client.close()
