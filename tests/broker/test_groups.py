"""Consumer groups with real clients against a real broker process."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.broker.conftest import ROOT, confluent_conf, kafka_python_conf, start_broker, stop_broker
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db


def produce(kafka, name, count, partitions, start=0):
    from confluent_kafka import Producer

    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"linger.ms": 5}))
    for i in range(start, start + count):
        producer.produce(name, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def consumer(kafka, group, strategy="range", **extra):
    from confluent_kafka import Consumer

    conf = confluent_conf(
        kafka,
        kafka.admin_a,
        **{
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": strategy,
            **extra,
        },
    )
    return Consumer(conf)


def poll_all(consumers, seconds, until=None):
    """Poll every consumer in turn; returns {index: [values]}."""
    got: dict[int, list[int]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                got[i].append(int(msg.value()))
        if until is not None and until(got):
            break
    return got


def wait_assigned(consumers, sizes, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if sorted(len(c.assignment()) for c in consumers) == sorted(sizes):
            return [sorted(tp.partition for tp in c.assignment()) for c in consumers]
    raise AssertionError(
        f"assignments {[len(c.assignment()) for c in consumers]} never became {sizes}"
    )


def test_queue_semantics_three_consumers_split_six_partitions(kafka):
    name = topic_name("queue")
    confluent_create(kafka, kafka.admin_a, name, partitions=6)
    group = f"g-{name}"
    consumers = [consumer(kafka, group) for _ in range(3)]
    for c in consumers:
        c.subscribe([name])
    assignments = wait_assigned(consumers, [2, 2, 2])
    assert sorted(p for a in assignments for p in a) == list(range(6))
    produce(kafka, name, 600, 6)
    got = poll_all(consumers, 30, until=lambda g: sum(map(len, g.values())) >= 600)
    values = [v for vs in got.values() for v in vs]
    assert sorted(values) == list(range(600))  # every record exactly once
    for i, c in enumerate(consumers):
        # Each member read only its own partitions, and nothing rebalanced meanwhile.
        assert sorted(tp.partition for tp in c.assignment()) == assignments[i]
        assert {v % 6 for v in got[i]} <= set(assignments[i])
    for c in consumers:
        c.close()


def test_pub_sub_every_group_reads_everything(kafka):
    name = topic_name("pubsub")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    produce(kafka, name, 200, 2)
    for group in (f"a-{name}", f"b-{name}"):
        c = consumer(kafka, group)
        c.subscribe([name])
        got = poll_all([c], 30, until=lambda g: len(g[0]) >= 200)
        assert sorted(got[0]) == list(range(200))
        c.close()


def test_commit_and_restart_resumes_from_the_committed_offset(kafka):
    from confluent_kafka import TopicPartition

    name = topic_name("commit")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    produce(kafka, name, 100, 1)
    group = f"g-{name}"
    c = consumer(kafka, group)
    c.subscribe([name])
    got = poll_all([c], 30, until=lambda g: len(g[0]) >= 40)[0][:40]
    c.commit(offsets=[TopicPartition(name, 0, 40)], asynchronous=False)
    c.close()
    assert got == list(range(40))
    again = consumer(kafka, group)
    again.subscribe([name])
    rest = poll_all([again], 30, until=lambda g: len(g[0]) >= 60)[0]
    assert rest == list(range(40, 100))
    committed = again.committed([TopicPartition(name, 0)], timeout=10)
    assert committed[0].offset == 40
    again.close()
    # A new group with auto.offset.reset=latest reads only what comes after it joined.
    late = consumer(kafka, f"late-{name}", **{"auto.offset.reset": "latest"})
    late.subscribe([name])
    wait_assigned([late], [1])
    time.sleep(0.5)
    produce(kafka, name, 5, 1, start=100)
    tail = poll_all([late], 20, until=lambda g: len(g[0]) >= 5)[0]
    assert tail == list(range(100, 105))
    late.close()


CONSUMER_SCRIPT = """
import json, sys, time
from confluent_kafka import Consumer
conf = json.loads(sys.argv[1])
c = Consumer(conf)
c.subscribe([sys.argv[2]])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    c.poll(0.1)
    print(json.dumps(sorted(tp.partition for tp in c.assignment())), flush=True)
"""


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_rebalance_on_join_leave_and_kill(kafka, strategy):
    name = topic_name("rebal")
    confluent_create(kafka, kafka.admin_a, name, partitions=6)
    group = f"g-{name}"
    first = consumer(kafka, group, strategy, **{"session.timeout.ms": 3000})
    first.subscribe([name])
    assert wait_assigned([first], [6]) == [list(range(6))]
    # A second member joins: the partitions are split.
    second = consumer(kafka, group, strategy, **{"session.timeout.ms": 3000})
    second.subscribe([name])
    a, b = wait_assigned([first, second], [3, 3])
    assert sorted(a + b) == list(range(6))
    # It leaves cleanly: the first gets everything back.
    second.close()
    assert wait_assigned([first], [6]) == [list(range(6))]
    # A member in another process is killed with SIGKILL: its session expires.
    conf = confluent_conf(
        kafka,
        kafka.admin_a,
        **{
            "group.id": group,
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": strategy,
        },
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", CONSUMER_SCRIPT, json.dumps(conf), name],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            first.poll(0.05)
            line = proc.stdout.readline()
            if line and len(json.loads(line)) == 3 and len(first.assignment()) == 3:
                break
        else:
            raise AssertionError("the second process never got its share")
    finally:
        proc.kill()
        proc.wait(10)
    started = time.monotonic()
    assert wait_assigned([first], [6], seconds=20) == [list(range(6))]
    assert time.monotonic() - started < 3.0 + 5  # session timeout, plus slack for CI
    first.close()


def test_committed_offsets_survive_a_broker_restart(kafka):
    from confluent_kafka import TopicPartition

    name = topic_name("durable")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    produce(kafka, name, 10, 2)
    group = f"g-{name}"
    c = consumer(kafka, group)
    c.subscribe([name])
    wait_assigned([c], [2])
    c.commit(offsets=[TopicPartition(name, 0, 3), TopicPartition(name, 1, 4)], asynchronous=False)
    c.close()
    stop_broker(kafka)
    start_broker(kafka)
    again = consumer(kafka, group)
    committed = again.committed([TopicPartition(name, 0), TopicPartition(name, 1)], timeout=20)
    assert [tp.offset for tp in committed] == [3, 4]
    again.close()


def test_kafka_python_group_consumes_and_commits(kafka):
    from kafka import KafkaConsumer, TopicPartition

    name = topic_name("kpgroup")
    confluent_create(kafka, kafka.admin_a, name, partitions=3)
    produce(kafka, name, 90, 3)
    group = f"g-{name}"
    c = KafkaConsumer(
        name,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=8000,
        **kafka_python_conf(kafka, kafka.admin_a),
    )
    values = []
    for msg in c:
        values.append(int(msg.value))
        if len(values) == 90:
            break
    assert sorted(values) == list(range(90))
    c.commit()
    assert c.committed(TopicPartition(name, 0)) == 30
    c.close()


def test_aiokafka_group_consumes_and_commits(kafka):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    name = topic_name("aiogroup")
    confluent_create(kafka, kafka.admin_a, name, partitions=3)
    produce(kafka, name, 90, 3)

    async def run():
        c = AIOKafkaConsumer(
            name,
            group_id=f"g-{name}",
            bootstrap_servers=kafka.bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=kafka.admin_a.key_id,
            sasl_plain_password=kafka.admin_a.secret,
        )
        await c.start()
        values = []
        while len(values) < 90:
            batch = await c.getmany(timeout_ms=2000)
            for messages in batch.values():
                values += [int(m.value) for m in messages]
        await c.commit()
        committed = await c.committed(TopicPartition(name, 1))
        await c.stop()
        return values, committed

    values, committed = asyncio.run(asyncio.wait_for(run(), 60))
    assert sorted(values) == list(range(90))
    assert committed == 30
