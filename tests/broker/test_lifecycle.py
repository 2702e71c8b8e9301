"""Broker lifecycle with real clients: restarts (graceful and kill -9), revocation, ACL changes.

Durability note: acknowledged records are in the OS page cache when the broker answers
(flushing is left to the OS, as in Kafka), so killing the process loses nothing; only a
machine crash could, which replication (Step 5) covers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid

import pytest
from django.db import connection

from control_plane.access import services as access_services
from control_plane.access.models import ApiKey
from control_plane.core.actor import Actor
from control_plane.tenancy.models import Tenant
from tests.broker.conftest import confluent_conf, start_broker, stop_broker
from tests.broker.test_clients import confluent_consume, confluent_create

pytestmark = pytest.mark.django_db


PRODUCE_UNTIL_SCRIPT = """
import json, sys, time
from confluent_kafka import Producer
conf, topic, deadline = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
producer = Producer(conf)
while time.time() < deadline:
    outcome = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    while producer.flush(1) > 0:
        pass
    if outcome == [None]:
        print(json.dumps({"ok": True}))
        sys.exit(0)
print(json.dumps({"ok": False}))
"""


def produce_until_accepted(conf: dict, name: str, seconds: float) -> dict:
    """Retry one produce in a child process until it is acknowledged, for ``seconds`` from
    now (wall clock, so the child's start-up counts against the time).

    A child keeps librdkafka's callbacks (and any error they leave behind) out of the test
    process, where later tests share the interpreter.
    """
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            PRODUCE_UNTIL_SCRIPT,
            json.dumps(conf),
            name,
            str(time.time() + seconds),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def committed(django_db_blocker, fn):
    """Run ``fn`` on its own thread and connection, so its writes commit at once.

    (Inside a ``django_db`` test the main connection sits in an uncommitted transaction
    that the broker process cannot see.)
    """
    result = []
    errors = []

    def run():
        try:
            result.append(fn())
        except Exception as exc:  # noqa: BLE001 - re-raised on the calling thread below
            errors.append(exc)
        finally:
            connection.close()

    with django_db_blocker.unblock():
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(30)
    if errors:
        raise errors[0]
    return result[0]


def produce(kafka, key, name, count, start=0):
    from confluent_kafka import Producer

    producer = Producer(confluent_conf(kafka, key, **{"linger.ms": 5, "acks": "1"}))
    delivered = []
    for i in range(start, start + count):
        producer.produce(
            name, value=str(i).encode(), on_delivery=lambda err, msg: delivered.append(err is None)
        )
    producer.flush(30)
    return sum(delivered)


@pytest.mark.parametrize("how", ["term", "kill"])
def test_restart_mid_stream_keeps_every_acknowledged_record(kafka, how):
    name = f"restart-{uuid.uuid4().hex[:8]}"
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    acked = produce(kafka, kafka.admin_a, name, 3000)
    assert acked == 3000
    assert stop_broker(kafka, how) in (0, -9)
    start_broker(kafka)
    acked += produce(kafka, kafka.admin_a, name, 1000, start=3000)
    got = confluent_consume(kafka, kafka.admin_a, name, 2, acked)
    assert sorted(int(m.value()) for m in got) == list(range(4000))


def test_revoked_key_is_refused_and_its_connections_close(kafka, django_db_blocker):
    from confluent_kafka import Producer

    name = f"revoke-{uuid.uuid4().hex[:8]}"
    confluent_create(kafka, kafka.admin_a, name, partitions=1)

    def make_key():
        tenant = Tenant.objects.get(slug=kafka.tenant_a)
        sa = access_services.create_service_account(
            Actor.system(), tenant, name=f"temp-{uuid.uuid4().hex[:6]}"
        )
        access_services.create_acl(
            Actor.system(),
            tenant,
            principal=sa.principal,
            resource_type="topic",
            pattern_type="literal",
            resource_name=name,
            operation="write",
            permission="allow",
        )
        return sa, access_services.create_api_key(Actor.system(), sa)

    sa, created = committed(django_db_blocker, make_key)
    from tests.broker.conftest import Key

    key = Key(created.api_key.key_id, created.secret, sa.principal)
    time.sleep(1.5)  # the new ACL and key reach the broker's snapshot
    producer = Producer(confluent_conf(kafka, key, **{"message.timeout.ms": 4000}))
    results = []
    producer.produce(name, b"before", on_delivery=lambda e, m: results.append(e))
    producer.flush(10)
    assert results == [None]
    committed(
        django_db_blocker,
        lambda: access_services.revoke_api_key(
            Actor.system(), ApiKey.objects.get(key_id=key.key_id)
        ),
    )
    revoked_at = time.monotonic()
    deadline = revoked_at + 5
    closed = False
    while time.monotonic() < deadline and not closed:
        closed = "closing connection of revoked key" in kafka.log_path.read_text()
        time.sleep(0.2)
    assert closed, "open connection was not closed within 5 s of revocation"
    results.clear()
    producer.produce(name, b"after", on_delivery=lambda e, m: results.append(e))
    producer.flush(10)
    assert results and results[0] is not None  # refused at login from now on


def test_acl_grant_takes_effect_within_two_seconds(kafka, django_db_blocker):

    name = f"shared-{uuid.uuid4().hex[:8]}"
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    committed(
        django_db_blocker,
        lambda: access_services.create_acl(
            Actor.system(),
            Tenant.objects.get(slug=kafka.tenant_a),
            principal=kafka.reader_a.principal,
            resource_type="topic",
            pattern_type="literal",
            resource_name=name,
            operation="write",
            permission="allow",
        ),
    )
    conf = confluent_conf(kafka, kafka.reader_a, **{"message.timeout.ms": 1000})
    ok = produce_until_accepted(conf, name, 2.5)["ok"]
    assert ok, "the new ACL was not in force within ~2 s"


def set_tenant_limits(slug: str, **limits: int | None) -> None:
    """Change a tenant's limits as an operator does (the service records the change, so
    brokers learn it as they learn any metadata change). Run it inside ``committed``."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from control_plane.core.actor import Actor
    from control_plane.tenancy import services as tenancy
    from control_plane.tenancy.models import Tenant

    operator, _ = get_user_model().objects.get_or_create(
        username="limits-operator", defaults={"is_staff": True}
    )
    with transaction.atomic():
        tenancy.update_tenant(Actor(user=operator), Tenant.objects.get(slug=slug), limits=limits)
