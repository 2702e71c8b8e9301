"""Every request version Kafka 3.9 served and Kafka 4 refuses (KIP-896), sent over a raw
socket to a real broker process and answered as Kafka 3.9 answered it. Produce v0-2,
Fetch v0-3 and SaslHandshake v0 have their own tests (test_wire.py); Sarama and
kafka-python pinned to old versions cover them with real clients (test_sarama.py,
test_kafka_python_pinned.py). The requests are written with Millrace's schemas, which
tests/protocol cross-checks against kafka-python's and aiokafka's classes at each
version; the answers are checked for what they say, not only that they decode."""

from __future__ import annotations

import uuid

import pytest

from data_plane.protocol.compat import KAFKA4_MIN_VERSION
from data_plane.protocol.errors import ErrorCode as E
from data_plane.records import Record, RecordBatch
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_wire import RawClient, produce

pytestmark = pytest.mark.django_db

LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 2, 8, 9, 10
CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH = 19, 20, 23
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS = 29, 30, 31, 32, 35
TOPIC, READ, ALLOW, LITERAL = 2, 3, 3, 3


@pytest.fixture(scope="module")
def raw(kafka):
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    yield client
    client.close()


@pytest.fixture(scope="module")
def topic(kafka, raw):
    """A topic of one partition holding five records (offsets 0-4)."""
    name = topic_name("old-wire")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    batch = RecordBatch(
        base_offset=0,
        records=tuple(Record(i, 1_700_000_000_000 + i, None, b"r%d" % i) for i in range(5)),
    ).encode()
    assert produce(raw, name, batch)["error_code"] == E.NONE
    return name


def test_the_versions_checked_here_are_all_kafka4_dropped():
    """This file and test_wire.py together reach every dropped range (a new entry in
    KAFKA4_MIN_VERSION needs a test here)."""
    here = {LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, CREATE_TOPICS, DELETE_TOPICS}
    here |= {OFFSET_FOR_LEADER_EPOCH, DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS}
    here |= {DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS}
    in_test_wire = {0, 1}  # Produce v0-2, Fetch v0-3
    assert set(KAFKA4_MIN_VERSION) == here | in_test_wire


def test_list_offsets_v0_gives_old_style_offsets(raw, topic):
    body = {
        "replica_id": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "timestamp": -1, "max_num_offsets": 1},
                    {"partition_index": 7, "timestamp": -1, "max_num_offsets": 1},
                ],
            }
        ],
    }
    (found, missing) = raw.request(LIST_OFFSETS, 0, body)["topics"][0]["partitions"]
    assert (found["error_code"], found["old_style_offsets"]) == (E.NONE, [5])
    assert missing["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    body["topics"][0]["partitions"] = [
        {"partition_index": 0, "timestamp": -2, "max_num_offsets": 1}
    ]
    (earliest,) = raw.request(LIST_OFFSETS, 0, body)["topics"][0]["partitions"]
    assert earliest["old_style_offsets"] == [0]


@pytest.mark.parametrize("version", [0, 1])
def test_offset_commit_v0_v1_and_offset_fetch_v0(raw, topic, version):
    group = f"old-wire-{uuid.uuid4().hex[:6]}"
    coordinator = raw.request(FIND_COORDINATOR, 0, {"key": group})
    assert coordinator["error_code"] == E.NONE
    partition = {"partition_index": 0, "committed_offset": 3, "committed_metadata": "m"}
    body: dict = {"group_id": group, "topics": [{"name": topic, "partitions": [partition]}]}
    if version == 1:  # a standalone commit: no generation, no member
        body |= {"generation_id_or_member_epoch": -1, "member_id": ""}
        partition["commit_timestamp"] = -1
    answer = raw.request(OFFSET_COMMIT, version, body)
    assert answer["topics"][0]["partitions"][0]["error_code"] == E.NONE
    fetch = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}
    for fetch_version in (0, 1):  # v0 reads what v0 wrote: one store of offsets
        got = raw.request(OFFSET_FETCH, fetch_version, fetch)["topics"][0]["partitions"][0]
        assert (got["error_code"], got["committed_offset"], got["metadata"]) == (E.NONE, 3, "m")


@pytest.mark.parametrize("version", [0, 1])
def test_create_topics_v0_v1_and_delete_topics_v0(raw, version):
    name = topic_name("old-create")
    topic = {
        "name": name,
        "num_partitions": 2,
        "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": "retention.ms", "value": "3600000"}],
    }
    body: dict = {"topics": [topic], "timeout_ms": 10_000}
    if version == 1:
        body["validate_only"] = True
        (checked,) = raw.request(CREATE_TOPICS, 1, body)["topics"]
        assert checked["error_code"] == E.NONE
        body["validate_only"] = False
    (created,) = raw.request(CREATE_TOPICS, version, body)["topics"]
    assert created["error_code"] == E.NONE
    (again,) = raw.request(CREATE_TOPICS, version, body)["topics"]
    assert again["error_code"] == E.TOPIC_ALREADY_EXISTS
    gone = raw.request(
        DELETE_TOPICS, 0, {"topic_names": [name, name + "-no"], "timeout_ms": 10_000}
    )
    assert {r["name"]: r["error_code"] for r in gone["responses"]} == {
        name: E.NONE,
        name + "-no": E.UNKNOWN_TOPIC_OR_PARTITION,
    }


@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_v0_v1(raw, topic, version):
    body = {"topics": [{"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}
    (answer,) = raw.request(OFFSET_FOR_LEADER_EPOCH, version, body)["topics"][0]["partitions"]
    assert (answer["error_code"], answer["end_offset"]) == (E.NONE, 5)
    if version == 1:
        assert answer["leader_epoch"] == 0


def test_describe_configs_v0(raw, topic):
    body = {
        "resources": [{"resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}]
    }
    (resource,) = raw.request(DESCRIBE_CONFIGS, 0, body)["results"]
    assert resource["error_code"] == E.NONE
    configs = {c["name"]: c for c in resource["configs"]}
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["is_default"] is True  # v0's flag, not config_source


def test_acl_apis_v0_create_describe_and_delete_a_literal_binding(kafka, raw):
    name = f"old-acl-{uuid.uuid4().hex[:6]}"
    binding = {
        "resource_type": TOPIC,
        "resource_name": name,
        "principal": kafka.reader_a.principal,  # an existing service account
        "host": "*",
        "operation": READ,
        "permission_type": ALLOW,
    }
    (created,) = raw.request(CREATE_ACLS, 0, {"creations": [binding]})["results"]
    assert created["error_code"] == E.NONE, created["error_message"]
    match = {
        "resource_type_filter": TOPIC,
        "resource_name_filter": name,
        "principal_filter": None,
        "host_filter": None,
        "operation": READ,
        "permission_type": ALLOW,
    }
    described = raw.request(DESCRIBE_ACLS, 0, match)
    assert described["error_code"] == E.NONE
    assert [
        (r["resource_name"], [a["principal"] for a in r["acls"]]) for r in described["resources"]
    ] == [(name, [kafka.reader_a.principal])]
    (deleted,) = raw.request(DELETE_ACLS, 0, {"filters": [match]})["filter_results"]
    assert deleted["error_code"] == E.NONE and len(deleted["matching_acls"]) == 1
    assert raw.request(DESCRIBE_ACLS, 0, match)["resources"] == []


def test_describe_log_dirs_v0(raw, topic):
    body = {"topics": [{"topic": topic, "partitions": [0]}]}
    (log_dir,) = raw.request(DESCRIBE_LOG_DIRS, 0, body)["results"]
    assert log_dir["error_code"] == E.NONE
    (found,) = log_dir["topics"]
    assert found["name"] == topic
    assert found["partitions"][0]["partition_size"] > 0
