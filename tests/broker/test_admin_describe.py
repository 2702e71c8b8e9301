"""Against a broker process: DescribeGroups 5-6 over a raw socket, and DescribeTopicPartitions
(KIP-966) and DescribeProducers through kafka-python 3's KafkaAdminClient (librdkafka 2.16
uses neither: its describe_topics asks Metadata, and it has no describe_producers)."""

from __future__ import annotations

import pytest

from data_plane.protocol.errors import ErrorCode as E
from tests.broker.conftest import confluent_conf, kafka_python_conf
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db

DESCRIBE_GROUPS = 15


def _kp_admin(kafka, key):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(**kafka_python_conf(kafka, key), request_timeout_ms=20_000)


def test_describe_topic_partitions_with_kafka_python(kafka):
    small, big = topic_name("dtp-a"), topic_name("dtp-b")
    confluent_create(kafka, kafka.admin_a, small, partitions=2)
    confluent_create(kafka, kafka.admin_a, big, partitions=5)
    admin = _kp_admin(kafka, kafka.admin_a)
    try:
        answer = admin.describe_topic_partitions([big, small])
        assert answer["next_cursor"] is None
        topics = {t["name"]: t for t in answer["topics"]}
        assert sorted(topics) == sorted([small, big])
        for name, count in ((small, 2), (big, 5)):
            t = topics[name]
            assert t["error_code"] == E.NONE
            assert [p["partition_index"] for p in t["partitions"]] == list(range(count))
            for p in t["partitions"]:
                # One broker: it leads every partition and is its only replica.
                assert p["error_code"] == E.NONE
                assert (p["leader_id"], p["replica_nodes"], p["isr_nodes"]) == (
                    kafka.broker_id,
                    [kafka.broker_id],
                    [kafka.broker_id],
                )
                assert p["leader_epoch"] >= 0
        # Pages of 3: big 0-2, then big 3-4.
        first = admin.describe_topic_partitions([big], response_partition_limit=3)
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1, 2]
        assert first["next_cursor"] == {"topic_name": big, "partition_index": 3}
        rest = admin.describe_topic_partitions(
            [big], response_partition_limit=3, cursor=first["next_cursor"]
        )
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [3, 4]
        assert rest["next_cursor"] is None
    finally:
        admin.close()
    # Tenant B does not see tenant A's topics.
    other = _kp_admin(kafka, kafka.admin_b)
    try:
        answer = other.describe_topic_partitions([small])
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
            (small, E.UNKNOWN_TOPIC_OR_PARTITION)
        ]
        everything = other.describe_topic_partitions([])
        assert small not in {t["name"] for t in everything["topics"]}
    finally:
        other.close()


def test_describe_producers_after_an_idempotent_confluent_producer(kafka):
    from confluent_kafka import Producer
    from kafka import TopicPartition
    from kafka.errors import UnknownTopicOrPartitionError

    name = topic_name("dp")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"enable.idempotence": True}))
    for i in range(5):
        producer.produce(name, value=b"v%d" % i, partition=0)
        assert producer.flush(20) == 0  # one batch each: sequences 0..4
    admin = _kp_admin(kafka, kafka.admin_a)
    try:
        states = admin.describe_producers([TopicPartition(name, 0), TopicPartition(name, 1)])
        [one] = states[TopicPartition(name, 0)].active_producers
        assert one.producer_id >= 0 and one.producer_epoch >= 0
        assert one.last_sequence == 4
        assert one.last_timestamp > 0
        assert (one.coordinator_epoch, one.current_transaction_start_offset) == (-1, -1)
        assert states[TopicPartition(name, 1)].active_producers == []
        # The same producer id and epoch that the broker handed out (InitProducerId):
        # a second producer gets a different id.
        other = Producer(confluent_conf(kafka, kafka.admin_a, **{"enable.idempotence": True}))
        other.produce(name, value=b"x", partition=0)
        assert other.flush(20) == 0
        ids = {
            p.producer_id
            for p in admin.describe_producers([TopicPartition(name, 0)])[
                TopicPartition(name, 0)
            ].active_producers
        }
        assert len(ids) == 2 and one.producer_id in ids
    finally:
        admin.close()
    # Tenant B: tenant A's topic is unknown.
    theirs = _kp_admin(kafka, kafka.admin_b)
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            theirs.describe_producers([TopicPartition(name, 0)], broker_id=kafka.broker_id)
    finally:
        theirs.close()


def test_describe_groups_v5_and_v6_for_a_live_and_an_unknown_group(kafka):
    from confluent_kafka import Consumer

    from tests.broker.test_wire import RawClient

    name, group = topic_name("dg"), topic_name("dg-group")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    consumer = Consumer(
        confluent_conf(kafka, kafka.admin_a, **{"group.id": group, "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([name])
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    try:
        body = {"groups": [group, "no-such-group"], "include_authorized_operations": False}
        for _ in range(60):  # until the consumer has joined
            consumer.poll(0.5)
            live = client.request(DESCRIBE_GROUPS, 6, body)["groups"][0]
            if live["group_state"] == "Stable":
                break
        assert (live["error_code"], live["error_message"]) == (E.NONE, None)
        assert len(live["members"]) == 1
        v6 = client.request(DESCRIBE_GROUPS, 6, body)["groups"][1]
        assert (v6["error_code"], v6["error_message"]) == (
            E.GROUP_ID_NOT_FOUND,
            "Group no-such-group not found.",
        )
        v5 = client.request(DESCRIBE_GROUPS, 5, body)["groups"]
        assert v5[0]["error_code"] == E.NONE and len(v5[0]["members"]) == 1
        assert (v5[1]["error_code"], v5[1]["group_state"]) == (E.NONE, "Dead")
        assert "error_message" not in v5[1]
    finally:
        client.close()
        consumer.close()
