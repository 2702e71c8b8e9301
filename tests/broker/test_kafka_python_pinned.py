"""kafka-python with ``api_version`` pinned to Kafka 0.10 and 1.0, as applications written
for those brokers still run it: create a topic, produce, list topics, fetch by assignment,
consume in a group with commits, and read the commits back. Pinned, kafka-python sends no
ApiVersions request and uses the versions it knows those brokers served: at 0.10 Produce
v2 and Fetch v2 in message format v1 (converted both ways by the broker), Metadata v1,
ListOffsets v0, OffsetCommit v2, JoinGroup v0, SaslHandshake v0 with bare SASL tokens; at
1.0 Produce v5/Fetch v6 with record batches and SaslAuthenticate. CreateTopics came with
Kafka 0.10.1, so kafka-python pinned at 0.10 (which it reads as 0.10.0) refuses to send
it; there the topic is created by its admin client pinned at 0.10.1 (CreateTopics v0).
What each stored is read back with confluent-kafka, an independent client."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic
from kafka.errors import IncompatibleBrokerVersion

from tests.broker.conftest import confluent_conf, kafka_python_conf
from tests.broker.test_clients import topic_name

pytestmark = pytest.mark.django_db

RECORDS = 30
PARTITIONS = 3


def _conf(kafka, version):
    return {**kafka_python_conf(kafka, kafka.admin_a, "PLAIN"), "api_version": version}


@pytest.mark.parametrize("version", [(0, 10), (1, 0)], ids=["0.10", "1.0"])
def test_kafka_python_pinned(kafka, version):
    name = topic_name("kp-pinned")
    group = f"{name}-group"
    admin = KafkaAdminClient(**_conf(kafka, version))
    try:
        if version == (0, 10):
            with pytest.raises(IncompatibleBrokerVersion):  # the client's own refusal
                admin.create_topics([NewTopic(name, PARTITIONS, 1)])
            creator = KafkaAdminClient(**_conf(kafka, (0, 10, 1)))
            try:
                creator.create_topics([NewTopic(name, PARTITIONS, 1)])
            finally:
                creator.close()
        else:
            admin.create_topics([NewTopic(name, PARTITIONS, 1)])
        assert name in admin.list_topics()
    finally:
        admin.close()

    producer = KafkaProducer(**_conf(kafka, version), acks="all")
    try:
        futures = [
            producer.send(name, key=str(i).encode(), value=str(i).encode(), partition=i % 3)
            for i in range(RECORDS)
        ]
        produced = [f.get(timeout=30) for f in futures]
    finally:
        producer.close()
    assert sorted((m.partition, m.offset) for m in produced) == sorted(
        (p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS)
    )

    consumer = KafkaConsumer(
        **_conf(kafka, version),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
    )
    seen = []
    try:
        consumer.subscribe([name])
        deadline = time.monotonic() + 60
        while len(seen) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                seen.extend(records)
        consumer.commit()
        committed = {p: consumer.committed(KTopicPartition(name, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()
    assert sorted(int(r.value) for r in seen) == list(range(RECORDS))
    assert all(r.key == r.value for r in seen)
    assert committed == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}

    # The same records and commits through confluent-kafka.
    oracle = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": group}))
    try:
        parts = [TopicPartition(name, p) for p in range(PARTITIONS)]
        assert {tp.partition: tp.offset for tp in oracle.committed(parts, timeout=30)} == {
            p: RECORDS // PARTITIONS for p in range(PARTITIONS)
        }
        oracle.assign([TopicPartition(name, p, 0) for p in range(PARTITIONS)])
        values = []
        for _ in range(60):
            if len(values) >= RECORDS:
                break
            for msg in oracle.consume(RECORDS, timeout=1):
                assert msg.error() is None, msg.error()
                values.append((msg.partition(), msg.offset(), int(msg.value())))
    finally:
        oracle.close()
    assert sorted(values) == sorted((i % 3, i // 3, i) for i in range(RECORDS))
