"""The mirror source connector against a real broker: tenant B's topics are the source
cluster, tenant A (the worker's own principal) the target; a standalone worker process
copies a 3-partition topic holding plain records, a committed transaction and an aborted
one (so source and target offsets differ), translates a group's committed offsets, commits
them to the same group in the target, and follows new records and a restart."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_standalone import Worker, _properties, _worker_config

pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000
PARTITIONS = 3
CONSUMED = {0: 10, 1: 15, 2: 5}  # records group G read of each partition: 30 of 60
WAIT_S = 30
BURST = 20_000


def _produce(producer, topic: str, first: int, count: int, prefix: str = "v") -> None:
    for i in range(first, first + count):
        producer.produce(
            topic,
            value=f"{prefix}{i}".encode(),
            key=f"k{i}".encode(),
            partition=i % PARTITIONS,
            timestamp=T0 + i,
            headers=[("seq", str(i).encode()), ("origin", b"source")],
        )


def _read_all(conf: dict, topic: str, count: int, timeout: float = WAIT_S) -> dict[int, list]:
    """``count`` records of ``topic`` from the start, per partition in order, as
    (offset, key, value, headers, timestamp); fails after ``timeout``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        conf | {"group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    found: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            metadata = consumer.list_topics(topic, timeout=5).topics.get(topic)
            if metadata is not None and metadata.error is None and metadata.partitions:
                break
            time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while sum(map(len, found.values())) < count and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.3):
                if m.error() is None:
                    found[m.partition()].append(
                        (m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1])
                    )
        for m in consumer.consume(500, 1.0):  # nothing more arrives
            if m.error() is None:
                found[m.partition()].append(
                    (m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1])
                )
    finally:
        consumer.close()
    got = sum(map(len, found.values()))
    assert got == count, f"{topic}: {got} records, wanted {count}"
    return found


def _content(records: list) -> list:
    return [r[1:] for r in records]  # without the offset


def _group_offsets(admin, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(10)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def _check_translated(target: dict, group: str, mirrored: str, upstream: dict) -> None:
    """Group ``group`` in the target: translated offsets, never past the first record it
    had not read (they may lag while the mirror confirms where records landed), and a
    consumer of it resumes at the record after its last one."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    target_admin = AdminClient(target)
    deadline = time.monotonic() + WAIT_S
    offsets: dict[int, int] = {}
    while time.monotonic() < deadline:
        offsets = _group_offsets(target_admin, group, mirrored)
        assert all(offsets[p] <= CONSUMED[p] for p in offsets), offsets
        if offsets == CONSUMED:
            break
        time.sleep(0.3)
    assert offsets == CONSUMED
    resumed = Consumer(target | {"group.id": group, "enable.auto.commit": False})
    resumed.assign([TopicPartition(mirrored, p) for p in range(PARTITIONS)])
    first: dict[int, tuple] = {}
    while len(first) < PARTITIONS and time.monotonic() < deadline:
        for m in resumed.consume(10, 0.5):
            if m.error() is None:
                first.setdefault(m.partition(), (m.key(), m.value()))
    resumed.close()
    assert first == {p: upstream[p][CONSUMED[p]][1:3] for p in range(PARTITIONS)}


def test_mirror_copies_topics_and_translates_group_offsets(kafka, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    started = time.monotonic()
    source = confluent_conf(kafka, kafka.admin_b)  # tenant B: the source cluster
    target = confluent_conf(kafka, kafka.admin_a)  # tenant A: the worker's cluster
    topic, hidden = topic_name("mirror"), "_" + topic_name("hidden")
    mirrored = f"source.{topic}"
    group = f"orders-{uuid.uuid4().hex[:6]}"
    source_admin, target_admin = AdminClient(source), AdminClient(target)
    for f in source_admin.create_topics(
        [NewTopic(topic, PARTITIONS, 1), NewTopic(hidden, 1, 1)]
    ).values():
        f.result(20)

    # 30 plain records, 15 in a committed transaction, 6 in an aborted one, 15 plain:
    # transaction markers and aborted records leave gaps the target does not have.
    producer = Producer(source | {"linger.ms": 5})
    _produce(producer, topic, 0, 30)
    producer.produce(hidden, b"internal")
    assert producer.flush(20) == 0
    txn = Producer(source | {"transactional.id": f"mirror-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(20)
    txn.begin_transaction()
    _produce(txn, topic, 30, 15)
    txn.commit_transaction(20)
    txn.begin_transaction()
    _produce(txn, topic, 100, 6, prefix="aborted")
    txn.abort_transaction(20)
    _produce(producer, topic, 45, 15)
    assert producer.flush(20) == 0

    # The source as a read_committed consumer sees it; group G reads part of each
    # partition and commits where it stands (the offset after its last record).
    upstream = _read_all(source, topic, 60)
    assert all(len(upstream[p]) == 20 for p in range(PARTITIONS))
    committed = {p: upstream[p][CONSUMED[p] - 1][0] + 1 for p in range(PARTITIONS)}
    # Partition 1's group stops after the transaction's last record: its offset is the
    # commit marker's, which has no record downstream.
    assert committed[1] != upstream[1][CONSUMED[1]][0]
    group_consumer = Consumer(source | {"group.id": group, "enable.auto.commit": False})
    group_consumer.commit(
        offsets=[TopicPartition(topic, p, committed[p]) for p in range(PARTITIONS)],
        asynchronous=False,
    )
    group_consumer.close()

    worker_file = _properties(tmp_path / "worker.properties", _worker_config(kafka, tmp_path))
    connector = _properties(
        tmp_path / "mirror.properties",
        {
            "name": f"mirror-{uuid.uuid4().hex[:6]}",
            "connector.class": "io.millrace.connect.mirror.MirrorSourceConnector",
            "tasks.max": "2",
            "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
            "source.cluster.bootstrap.servers": kafka.bootstrap,
            "source.cluster.security.protocol": "SASL_PLAINTEXT",
            "source.cluster.sasl.mechanism": "SCRAM-SHA-256",
            "source.cluster.sasl.username": kafka.admin_b.key_id,
            "source.cluster.sasl.password": kafka.admin_b.secret,
            "emit.checkpoints.interval.seconds": "1",
            "sync.group.offsets.interval.seconds": "1",
            "refresh.topics.interval.seconds": "1",
        },
    )
    worker = Worker(tmp_path, kafka.env, [worker_file, connector])
    try:
        # Every committed record, none of the aborted ones, each with its key, value,
        # headers and timestamp, in its partition, in order.
        downstream = _read_all(target, mirrored, 60)
        for p in range(PARTITIONS):
            assert _content(downstream[p]) == _content(upstream[p])
            assert [r[0] for r in downstream[p]] == list(range(20))

        _check_translated(target, group, mirrored, upstream)

        # The checkpoints and offset syncs behind it, in the target's internal topics.
        checkpoints = _latest(target, "source.checkpoints.internal")
        for p in range(PARTITIONS):
            key = {"group": group, "topic": mirrored, "partition": p}
            assert checkpoints[json.dumps(key, sort_keys=True)] == {
                "upstream": committed[p],
                "downstream": CONSUMED[p],
            }
        syncs = _latest(target, "mm2-offset-syncs.source.internal")
        for p in range(PARTITIONS):
            pair = syncs[json.dumps({"partition": p, "topic": topic}, sort_keys=True)]
            assert upstream[p][pair["downstream"]][0] == pair["upstream"]

        # Internal topics are not copied; new records follow, a burst of them (the mirror
        # holds some back while it confirms where earlier ones landed: none is lost).
        assert f"source.{hidden}" not in target_admin.list_topics(timeout=10).topics
        _produce(producer, topic, 60, BURST)
        assert producer.flush(20) == 0
        more = _read_all(target, mirrored, 60 + BURST)
        now = _read_all(source, topic, 60 + BURST)
        for p in range(PARTITIONS):
            assert _content(more[p]) == _content(now[p])
    finally:
        worker.stop()

    # Stopped cleanly, the worker committed its offsets: a restart copies only what is new.
    total = 60 + BURST + 6
    _produce(producer, topic, 60 + BURST, 6)
    assert producer.flush(20) == 0
    again = Worker(tmp_path, kafka.env, [worker_file, connector])
    try:
        final = _read_all(target, mirrored, total)
    finally:
        again.stop()
    expected = _read_all(source, topic, total)
    for p in range(PARTITIONS):
        assert _content(final[p]) == _content(expected[p])
    print(f"mirror test took {time.monotonic() - started:.1f} s")


def _latest(conf: dict, topic: str) -> dict[str, dict]:
    """The last value of each key of a compacted topic (keys normalised as sorted JSON)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        conf | {"group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    found: dict[str, dict] = {}
    position, deadline = 0, time.monotonic() + 10
    while position < end and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.3):
            if m.error() is None:
                found[json.dumps(json.loads(m.key()), sort_keys=True)] = json.loads(m.value())
                position = m.offset() + 1
    consumer.close()
    assert position >= end, f"{topic}: read to {position} of {end}"
    return found
