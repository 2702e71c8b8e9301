"""Usage metering against two real brokers and real clients, across a broker restart:
the hourly rows add up to the brokers' own byte counters (their Prometheus metrics,
scraped before the restart and after it), and the chargeback splits them by service
account (confluent-kafka produces as one, kafka-python consumes as another)."""

from __future__ import annotations

import time
import uuid

import pytest

from control_plane.tenancy.models import Tenant
from control_plane.usage import services as usage
from tests.broker.conftest import (
    _brokers,
    confluent_conf,
    kafka_python_conf,
    start_broker,
    stop_broker,
)
from tests.broker.test_lifecycle import committed
from tests.broker.test_operations import metrics, value

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    extra = {"MILLRACE_BROKER_USAGE_REPORT_SECONDS": "1"}
    yield from _brokers(django_db_blocker, tmp_path_factory, 2, extra_env=extra)


def _counted(cluster, tenant: str, topic: str) -> tuple[float, float]:
    """(bytes in, bytes out) of the topic by the brokers' own counters, now."""
    texts = [metrics(b) for b in cluster]
    inn = sum(value(t, "millrace_broker_bytes_in_total", tenant=tenant, topic=topic) for t in texts)
    out = sum(
        value(t, "millrace_broker_bytes_out_total", tenant=tenant, topic=topic) for t in texts
    )
    return inn, out


def _produce(env, key, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(confluent_conf(env, key, acks="all", **{"linger.ms": 5}))
    for i in range(count):
        producer.produce(topic, b"v" * (100 + i % 50), key=b"%d" % i)
    assert producer.flush(30) == 0


def _consume(env, key, topic: str, count: int) -> int:
    """Read the topic's two partitions from the start (no group: the reader's key may
    only read "shared-" topics)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**kafka_python_conf(env, key), auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=1000).values():
            seen += len(batch)
    consumer.close()
    return seen


def test_hourly_usage_reconciles_with_the_brokers_counters_across_a_restart(
    cluster, django_db_blocker
):
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench import perf

    env = cluster[0]
    topic = f"shared-metered-{uuid.uuid4().hex[:6]}"  # reader_a may read "shared-" topics
    admin = AdminClient(confluent_conf(env, env.admin_a))
    perf.create_topics(admin, [NewTopic(topic, 2, 2)], timeout=30)
    _produce(env, env.admin_a, topic, 300)
    assert _consume(env, env.reader_a, topic, 300) == 300
    # Broker 1 restarts cleanly (it reports what it counted before it stops); its
    # counters start again from zero, so they are read before and after.
    before = _counted(cluster[:1], env.tenant_a, topic)
    stop_broker(cluster[0])
    start_broker(cluster[0])
    _produce(env, env.admin_a, topic, 200)
    assert _consume(env, env.reader_a, topic, 500) == 500
    after = _counted(cluster, env.tenant_a, topic)
    brokers_in, brokers_out = before[0] + after[0], before[1] + after[1]
    assert brokers_in > 0 and brokers_out >= brokers_in  # read back twice, in full
    tenant = committed(django_db_blocker, lambda: Tenant.objects.get(slug=env.tenant_a))

    def reported():
        return usage.raw_totals(tenant.pk)

    deadline = time.monotonic() + 15
    while True:  # the brokers report every second
        raw = committed(django_db_blocker, reported)
        if (raw["produce_bytes"], raw["fetch_bytes"]) == (brokers_in, brokers_out):
            break
        assert time.monotonic() < deadline, (raw, brokers_in, brokers_out)
        time.sleep(0.5)

    def hourly():
        usage.aggregate()
        start, end = usage.period(None, None)
        return (
            usage.usage([tenant], start, end, "topic"),
            usage.usage([tenant], start, end, "principal"),
        )

    by_topic, by_principal = committed(django_db_blocker, hourly)
    (row,) = [r for r in by_topic if r["topic"] == topic]
    assert (row["produce_bytes"], row["fetch_bytes"]) == (brokers_in, brokers_out)
    assert row["produce_records"] == 500 and row["fetch_records"] == 800
    assert row["partition_seconds"] > 0 and row["storage_byte_seconds"] > 0
    charged = {r["principal"]: r for r in by_principal}
    assert charged[env.admin_a.principal]["produce_bytes"] == brokers_in
    assert charged[env.admin_a.principal]["fetch_bytes"] == 0
    assert charged[env.reader_a.principal]["fetch_bytes"] == brokers_out
    assert charged[env.reader_a.principal]["produce_bytes"] == 0
    assert charged[env.reader_a.principal]["requests"] > 0
