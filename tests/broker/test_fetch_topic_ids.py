"""Fetch v13-17 over real sockets: topics named by id, against two broker processes.

Records are produced with confluent-kafka and read back with a raw Fetch by topic id
(tests/broker/test_wire.py's raw client), decoding the returned batches.
"""

from __future__ import annotations

import time
import uuid

import pytest

from data_plane.protocol.errors import ErrorCode as E
from data_plane.records import RecordBatch
from data_plane.records.batch import read_header
from tests.broker.conftest import _brokers, confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_wire import FETCH, METADATA, RawClient

pytestmark = pytest.mark.django_db
BY_ID = [13, 14, 15, 16, 17]


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _brokers(django_db_blocker, tmp_path_factory, 2)


def admin(env, key):
    from confluent_kafka.admin import AdminClient

    return AdminClient(confluent_conf(env, key))


def create(env, key, name, partitions=2):
    from confluent_kafka.admin import NewTopic

    client = admin(env, key)  # kept alive until the answer: a dropped client cancels it
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=20)


def produce(env, key, name, partition, values):
    from confluent_kafka import Producer

    producer = Producer(confluent_conf(env, key, acks="all"))
    for value in values:
        producer.produce(name, value, partition=partition)
    assert producer.flush(20) == 0


def client(env, key) -> RawClient:
    raw = RawClient(env)
    raw.login(key)
    return raw


def describe(env, key, name, *, wait_for_new_id: uuid.UUID | None = None):
    """(topic id, {partition: (leader, leader epoch)}) from Metadata v12 on ``env``."""
    raw = client(env, key)
    try:
        deadline = time.monotonic() + 20
        while True:
            answer = raw.request(METADATA, 12, {"topics": [{"name": name}]})
            [topic] = answer["topics"]
            ready = topic["error_code"] == E.NONE and all(
                p["leader_id"] >= 0 for p in topic["partitions"]
            )
            if ready and topic["topic_id"] != wait_for_new_id:
                leaders = {
                    p["partition_index"]: (p["leader_id"], p["leader_epoch"])
                    for p in topic["partitions"]
                }
                return topic["topic_id"], leaders
            assert time.monotonic() < deadline, topic
            time.sleep(0.2)
    finally:
        raw.close()


def describe_everywhere(cluster, key, name, *, wait_for_new_id: uuid.UUID | None = None):
    """As :func:`describe`, once every broker's metadata has the topic (a broker that has
    not seen it yet rightly answers for it as unknown)."""
    first = describe(cluster[0], key, name, wait_for_new_id=wait_for_new_id)
    for env in cluster[1:]:
        assert describe(env, key, name, wait_for_new_id=wait_for_new_id)[0] == first[0]
    return first


def fetch(raw: RawClient, version: int, wanted: list[tuple[uuid.UUID, int]]) -> dict:
    return raw.request(
        FETCH,
        version,
        {
            "max_wait_ms": 100,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition": index,
                            "fetch_offset": 0,
                            "partition_max_bytes": 1 << 20,
                            "replica_directory_id": uuid.uuid4(),
                        }
                    ],
                }
                for topic_id, index in wanted
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )


def values(records) -> list[bytes | None]:
    """The record values in a Fetch answer's record batches."""
    buf = bytes(records or b"")
    out: list[bytes | None] = []
    pos = 0
    while pos < len(buf):
        size = read_header(buf, pos).size
        out += [r.value for r in RecordBatch.decode(buf[pos : pos + size]).records]
        pos += size
    return out


def leader_env(cluster, leaders, partition):
    return next(env for env in cluster if env.broker_id == leaders[partition][0])


@pytest.mark.parametrize("version", BY_ID)
def test_fetch_by_topic_id_returns_the_produced_records(cluster, version):
    key = cluster[0].admin_a
    name = topic_name("byid")
    create(cluster[0], key, name)
    topic_id, leaders = describe(cluster[0], key, name)
    sent = [f"v{version}-{i}".encode() for i in range(5)]
    produce(cluster[0], key, name, 1, sent)
    raw = client(leader_env(cluster, leaders, 1), key)
    answer = fetch(raw, version, [(topic_id, 1)])
    raw.close()
    assert answer["error_code"] == E.NONE and answer["session_id"] == 0
    [topic] = answer["responses"]
    assert topic["topic_id"] == topic_id
    [part] = topic["partitions"]
    assert (part["partition_index"], part["error_code"]) == (1, E.NONE)
    assert part["high_watermark"] == 5
    assert values(part["records"]) == sent
    assert answer.get("node_endpoints", []) == []


@pytest.mark.parametrize("version", BY_ID)
def test_unknown_and_other_tenants_topic_ids_are_unknown_topic_id(cluster, version):
    env = cluster[0]
    theirs = topic_name("theirs")
    create(env, env.admin_b, theirs, partitions=1)
    their_id, leaders = describe(env, env.admin_b, theirs)
    produce(env, env.admin_b, theirs, 0, [b"secret"])
    stranger = uuid.uuid4()
    leader = leader_env(cluster, leaders, 0)
    raw = client(leader, env.admin_a)
    answer = fetch(raw, version, [(their_id, 0), (stranger, 0)])
    raw.close()
    assert [t["topic_id"] for t in answer["responses"]] == [their_id, stranger]
    for t in answer["responses"]:
        [part] = t["partitions"]
        assert part["error_code"] == E.UNKNOWN_TOPIC_ID
        assert values(part["records"]) == []
    # The id is real: its own tenant reads it.
    raw = client(leader, env.admin_b)
    [t] = fetch(raw, version, [(their_id, 0)])["responses"]
    raw.close()
    assert values(t["partitions"][0]["records"]) == [b"secret"]


def test_a_recreated_topic_has_a_new_id_and_the_old_one_is_unknown(cluster):
    from confluent_kafka import KafkaException

    env, key = cluster[0], cluster[0].admin_a
    name = topic_name("again")
    create(env, key, name, partitions=1)
    old_id, _ = describe_everywhere(cluster, key, name)
    deleter = admin(env, key)
    deleter.delete_topics([name])[name].result(timeout=20)
    deadline = time.monotonic() + 20
    while True:  # the topic's deletion must be seen before it can be created again
        try:
            create(env, key, name, partitions=1)
            break
        except KafkaException:
            assert time.monotonic() < deadline
            time.sleep(0.3)
    new_id, leaders = describe_everywhere(cluster, key, name, wait_for_new_id=old_id)
    assert new_id != old_id
    produce(env, key, name, 0, [b"reborn"])
    for version in BY_ID:
        # Ask every broker: each one's metadata must have dropped the old id.
        for broker in cluster:
            raw = client(broker, key)
            stale, fresh = fetch(raw, version, [(old_id, 0), (new_id, 0)])["responses"]
            raw.close()
            assert stale["topic_id"] == old_id and fresh["topic_id"] == new_id
            assert stale["partitions"][0]["error_code"] == E.UNKNOWN_TOPIC_ID
            if broker.broker_id == leaders[0][0]:
                assert fresh["partitions"][0]["error_code"] == E.NONE
                assert values(fresh["partitions"][0]["records"]) == [b"reborn"]
            else:
                assert fresh["partitions"][0]["error_code"] == E.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("version", BY_ID)
def test_fetch_from_a_follower_names_the_leader_from_v16(cluster, version):
    env, key = cluster[0], cluster[0].admin_a
    name = topic_name("moved")
    create(env, key, name, partitions=1)
    topic_id, leaders = describe_everywhere(cluster, key, name)
    leader_id, epoch = leaders[0]
    other = next(e for e in cluster if e.broker_id != leader_id)
    leader = leader_env(cluster, leaders, 0)
    raw = client(other, key)
    answer = fetch(raw, version, [(topic_id, 0)])
    raw.close()
    [part] = answer["responses"][0]["partitions"]
    assert part["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    if version < 16:
        assert part["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
        assert answer.get("node_endpoints", []) == []
        return
    assert part["current_leader"] == {"leader_id": leader_id, "leader_epoch": epoch}
    assert answer["node_endpoints"] == [
        {"node_id": leader_id, "host": "127.0.0.1", "port": leader.port, "rack": None}
    ]
