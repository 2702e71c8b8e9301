"""Produce v10 (KIP-951) and topic ids across APIs, over real sockets against two brokers.

Produce v10 raw: records produced are read back by a Fetch by topic id (their values,
not only offsets); produced to the broker not leading, the answer names the leader and
its address. Then one topic id through Metadata, Fetch and DeleteTopics: the id Metadata
answers is the one Fetch reads and DeleteTopics deletes, another tenant's id deletes
nothing, and a recreated topic's new id differs.
"""

from __future__ import annotations

import time
import uuid

import pytest

from data_plane.protocol.errors import ErrorCode as E
from data_plane.records import Record, RecordBatch
from tests.broker.conftest import _brokers
from tests.broker.test_clients import topic_name
from tests.broker.test_fetch_topic_ids import (
    client,
    create,
    describe,
    describe_everywhere,
    fetch,
    leader_env,
    values,
)
from tests.broker.test_wire import PRODUCE

pytestmark = pytest.mark.django_db
DELETE_TOPICS = 20


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _brokers(django_db_blocker, tmp_path_factory, 2)


def produce_raw(env, key, version: int, name: str, partition: int, sent: list[bytes]) -> dict:
    records = RecordBatch(
        base_offset=0,
        records=tuple(Record(i, 1_700_000_000_000 + i, None, v) for i, v in enumerate(sent)),
    ).encode()
    raw = client(env, key)
    try:
        return raw.request(
            PRODUCE,
            version,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 10_000,
                "topic_data": [
                    {"name": name, "partition_data": [{"index": partition, "records": records}]}
                ],
            },
        )
    finally:
        raw.close()


@pytest.mark.parametrize("version", [9, 10])
def test_produce_to_the_leader_stores_the_values(cluster, version):
    env, key = cluster[0], cluster[0].admin_a
    name = topic_name("p10")
    create(env, key, name, partitions=2)
    topic_id, leaders = describe_everywhere(cluster, key, name)
    leader = leader_env(cluster, leaders, 1)
    sent = [f"v{version}-{i}".encode() for i in range(4)]
    answer = produce_raw(leader, key, version, name, 1, sent)
    [t] = answer["responses"]
    [part] = t["partition_responses"]
    assert (t["name"], part["index"], part["error_code"]) == (name, 1, E.NONE)
    assert part["base_offset"] == 0
    if version >= 10:  # not sent: read as the defaults
        assert part["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
    assert answer.get("node_endpoints", []) == []
    again = produce_raw(leader, key, version, name, 1, [b"more"])
    assert again["responses"][0]["partition_responses"][0]["base_offset"] == 4
    raw = client(leader, key)
    [fetched] = fetch(raw, 13, [(topic_id, 1)])["responses"]
    raw.close()
    assert fetched["partitions"][0]["high_watermark"] == 5
    assert values(fetched["partitions"][0]["records"]) == [*sent, b"more"]


@pytest.mark.parametrize("version", [9, 10])
def test_produce_to_a_follower_names_the_leader_from_v10(cluster, version):
    env, key = cluster[0], cluster[0].admin_a
    name = topic_name("p10moved")
    create(env, key, name, partitions=1)
    topic_id, leaders = describe_everywhere(cluster, key, name)
    leader_id, epoch = leaders[0]
    leader = leader_env(cluster, leaders, 0)
    other = next(e for e in cluster if e.broker_id != leader_id)
    answer = produce_raw(other, key, version, name, 0, [b"misdirected"])
    [part] = answer["responses"][0]["partition_responses"]
    assert (part["error_code"], part["base_offset"]) == (E.NOT_LEADER_OR_FOLLOWER, -1)
    if version < 10:
        assert "current_leader" not in part
        assert answer.get("node_endpoints", []) == []
    else:
        assert part["current_leader"] == {"leader_id": leader_id, "leader_epoch": epoch}
        assert answer["node_endpoints"] == [
            {"node_id": leader_id, "host": "127.0.0.1", "port": leader.port, "rack": None}
        ]
    # Nothing was stored anywhere.
    raw = client(leader, key)
    [fetched] = fetch(raw, 13, [(topic_id, 0)])["responses"]
    raw.close()
    assert values(fetched["partitions"][0]["records"]) == []


def delete_by_id(env, key, ids: list[uuid.UUID]) -> list[dict]:
    raw = client(env, key)
    try:
        answer = raw.request(
            DELETE_TOPICS,
            6,
            {"topics": [{"name": None, "topic_id": i} for i in ids], "timeout_ms": 10_000},
        )
    finally:
        raw.close()
    return list(answer["responses"])


def test_one_topic_id_across_metadata_fetch_and_delete_topics(cluster):
    from confluent_kafka import KafkaException

    env, key, other_tenant = cluster[0], cluster[0].admin_a, cluster[0].admin_b
    name = topic_name("oneid")
    create(env, key, name, partitions=1)
    # Metadata v10 (the first with ids) and v12 agree, on every broker.
    topic_id, leaders = describe_everywhere(cluster, key, name)
    raw = client(env, key)
    [v10] = raw.request(3, 10, {"topics": [{"name": name}]})["topics"]
    raw.close()
    assert v10["topic_id"] == topic_id != uuid.UUID(int=0)
    leader = leader_env(cluster, leaders, 0)
    produce_raw(leader, key, 10, name, 0, [b"by-id"])
    # Fetch v13 reads by that id.
    raw = client(leader, key)
    [fetched] = fetch(raw, 13, [(topic_id, 0)])["responses"]
    raw.close()
    assert values(fetched["partitions"][0]["records"]) == [b"by-id"]
    # Another tenant cannot delete it by its id: unknown, and it is still there.
    [refused] = delete_by_id(env, other_tenant, [topic_id])
    assert (refused["name"], refused["topic_id"]) == (None, topic_id)
    assert refused["error_code"] == E.UNKNOWN_TOPIC_ID
    assert describe(env, key, name)[0] == topic_id
    # DeleteTopics v6 deletes by the same id.
    [done] = delete_by_id(env, key, [topic_id])
    assert (done["name"], done["topic_id"], done["error_code"]) == (name, topic_id, E.NONE)
    # Recreated: a new id; the old one deletes nothing and is unknown.
    deadline = time.monotonic() + 20
    while True:
        try:
            create(env, key, name, partitions=1)
            break
        except KafkaException:
            assert time.monotonic() < deadline
            time.sleep(0.3)
    new_id, _ = describe_everywhere(cluster, key, name, wait_for_new_id=topic_id)
    assert new_id != topic_id
    [stale] = delete_by_id(env, key, [topic_id])
    assert (stale["name"], stale["error_code"]) == (None, E.UNKNOWN_TOPIC_ID)
    assert describe(env, key, name)[0] == new_id
