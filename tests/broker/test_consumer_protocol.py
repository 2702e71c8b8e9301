"""KIP-848 consumer groups with confluent-kafka's ``group.protocol=consumer`` against a real
broker process that serves the consumer protocol."""

from __future__ import annotations

import time

import pytest

from tests.broker.conftest import _brokers, confluent_conf
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db

HEARTBEAT_MS = 300


@pytest.fixture(scope="module")
def kafka(django_db_setup, django_db_blocker, tmp_path_factory):
    extra = {
        "MILLRACE_GROUP_PROTOCOLS": "classic,consumer",
        "MILLRACE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_MS),
        "MILLRACE_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "3000",
    }
    for envs in _brokers(django_db_blocker, tmp_path_factory, 1, extra_env=extra):
        yield envs[0]


def produce(kafka, name, count, partitions, start=0):
    from confluent_kafka import Producer

    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"linger.ms": 5}))
    for i in range(start, start + count):
        producer.produce(name, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def consumer(kafka, group, key=None, **extra):
    from confluent_kafka import Consumer

    conf = confluent_conf(
        kafka,
        key or kafka.admin_a,
        **{
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        },
    )
    return Consumer(conf)


def wait_assigned(consumers, sizes, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if sorted(len(c.assignment()) for c in consumers) == sorted(sizes):
            return [sorted((tp.topic, tp.partition) for tp in c.assignment()) for c in consumers]
    raise AssertionError(
        f"assignments {[len(c.assignment()) for c in consumers]} never became {sizes}"
    )


def test_two_members_split_the_partitions_and_consume_everything(kafka):
    name = topic_name("kip848")
    confluent_create(kafka, kafka.admin_a, name, partitions=6)
    group = f"g-{name}"
    consumers = [consumer(kafka, group) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([name])
        assignments = wait_assigned(consumers, [3, 3])
        assert sorted(p for a in assignments for _, p in a) == list(range(6))
        produce(kafka, name, 120, 6)
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 120 and time.monotonic() < deadline:
            for c in consumers:
                msg = c.poll(0.05)
                if msg is not None and msg.error() is None:
                    got.append(int(msg.value()))
        assert sorted(got) == list(range(120))
    finally:
        for c in consumers:
            c.close()
