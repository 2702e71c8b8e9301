"""Suspending a tenant, against a real broker with real clients: produce on an open
connection is refused with the reason, new connections are refused (confluent-kafka and
kafka-python), a consumer already connected reads on through the grace period and is cut
off after it, another tenant is untouched, and resuming restores everything.

(A module of its own: it suspends the module's tenant A.)"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from django.contrib.auth import get_user_model

from control_plane.core.actor import Actor
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Tenant
from tests.broker.conftest import confluent_conf, kafka_python_conf
from tests.broker.test_clients import confluent_create
from tests.broker.test_lifecycle import committed

pytestmark = pytest.mark.django_db


def operator(django_db_blocker) -> Actor:
    def make():
        user, _ = get_user_model().objects.get_or_create(
            username="suspending-operator", defaults={"is_staff": True}
        )
        return user

    return Actor(user=committed(django_db_blocker, make))


def deliver(producer: Producer, topic: str, value: bytes) -> object:
    """The delivery report's error (None: delivered)."""
    results: list[object] = []
    producer.produce(topic, value, on_delivery=lambda err, msg: results.append(err))
    producer.flush(15)
    assert results, "no delivery report"
    return results[0]


def wait_for(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_a_suspended_tenant_cannot_write_or_connect_and_resumes_whole(
    kafka, django_db_blocker, caplog
):
    topic = f"susp-{uuid.uuid4().hex[:8]}"
    confluent_create(kafka, kafka.admin_a, topic, partitions=1)
    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"message.timeout.ms": 8000}))
    for i in range(3):
        assert deliver(producer, topic, b"before-%d" % i) is None
    consumer = Consumer(
        confluent_conf(
            kafka, kafka.admin_a, **{"group.id": f"g-{topic}", "enable.auto.commit": False}
        )
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    first = consumer.consume(1, 10)
    assert [m.value() for m in first] == [b"before-0"]
    other = Producer(confluent_conf(kafka, kafka.admin_b))
    other_topic = f"other-{uuid.uuid4().hex[:8]}"
    confluent_create(kafka, kafka.admin_b, other_topic, partitions=1)

    actor = operator(django_db_blocker)
    tenant = committed(django_db_blocker, lambda: Tenant.objects.get(slug=kafka.tenant_a))
    committed(
        django_db_blocker,
        lambda: tenancy_services.suspend_tenant(
            actor, tenant, reason="unpaid invoice", read_grace_seconds=5
        ),
    )
    # Produce on the open connection is refused, with the reason, once the broker knows.
    # (probes delivered before the broker learned of it are not refused, rightly)
    assert wait_for(lambda: deliver(producer, topic, b"probe") is not None)
    error = deliver(producer, topic, b"during")
    # POLICY_VIOLATION, which clients do not retry (the reason is in the response's
    # error_message, which librdkafka does not show; a new connection is told it).
    assert error is not None and error.code() == 44
    # New connections are refused with the reason (two client libraries).
    told: list[str] = []
    fresh = Producer(
        confluent_conf(kafka, kafka.admin_a, error_cb=lambda err: told.append(str(err)))
    )
    with pytest.raises(KafkaException):
        fresh.list_topics(timeout=5)
    assert wait_for(lambda: fresh.poll(0.2) is not None or told)
    reason = f"tenant {kafka.tenant_a!r} is suspended: unpaid invoice"
    assert any(reason in t for t in told), told
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError):  # kafka-python logs why and gives up bootstrapping
        KafkaConsumer(**kafka_python_conf(kafka, kafka.admin_a), request_timeout_ms=6000)
    assert any(
        "SaslAuthenticationFailedError" in r.getMessage() and reason in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records][-5:]
    # The consumer already connected reads on within the grace period...
    rest = consumer.consume(2, 10)
    assert [m.value() for m in rest if m.error() is None] == [b"before-1", b"before-2"]
    # ...and another tenant is untouched.
    assert deliver(other, other_topic, b"unaffected") is None
    # After the grace period the broker closes the tenant's connections.
    assert wait_for(
        lambda: "closing connection of suspended tenant" in kafka.log_path.read_text(), 20
    )

    committed(django_db_blocker, lambda: tenancy_services.resume_tenant(actor, tenant))
    resumed = Producer(confluent_conf(kafka, kafka.admin_a, **{"message.timeout.ms": 8000}))
    assert wait_for(lambda: deliver(resumed, topic, b"after") is None, 15)
    reader = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": f"r-{topic}"}))
    reader.assign([TopicPartition(topic, 0, 0)])
    values = [m.value() for m in reader.consume(10, 10) if m.error() is None]
    assert values[:3] == [b"before-0", b"before-1", b"before-2"] and values[-1] == b"after"
    assert b"during" not in values
    for client in (consumer, reader):
        client.close()
    committed(django_db_blocker, lambda: get_user_model().objects.filter(pk=actor.user.pk).delete())
