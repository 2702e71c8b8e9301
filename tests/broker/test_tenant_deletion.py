"""Deleting a tenant against two real brokers, real clients and a real Celery worker.

While a confluent-kafka producer and consumer and a kafka-python producer of the tenant
are connected, its owner deletes it: within 5 s the brokers close their connections and
refuse new ones. The deletion job runs in a Celery worker process that is killed (SIGKILL)
half-way through the topics; once its lease lapses the deletion is found unfinished and a
second worker finishes it. Then nothing of the tenant is on either broker's disk or in
Postgres except its audit trail, and another tenant's clients never noticed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from django.contrib.auth import get_user_model
from django.db import connection

from bench import perf
from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.audit.models import AuditEvent
from control_plane.catalog.models import Topic
from control_plane.core.actor import Actor
from control_plane.groups.models import CommittedOffset, ConsumerGroup
from control_plane.lifecycle import services as lifecycle
from control_plane.lifecycle.models import DeletionState, TenantDeletion
from control_plane.lifecycle.tasks import delete_tenant
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Membership, Tenant
from control_plane.transactions.models import TransactionState
from tests.broker.conftest import FULL, _brokers, _key, confluent_conf, kafka_python_conf
from tests.broker.test_lifecycle import committed

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
TOPICS = 9
BATCH = 3  # topics per batch: the worker is killed after the first


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _brokers(django_db_blocker, tmp_path_factory, 2)


def wait_for(check, seconds: float, what: str) -> float:
    """Seconds it took ``check`` to hold (fails after ``seconds``)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if check():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def _worker(env: dict[str, str], queue: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "control_plane",
            "worker",
            "-Q",
            queue,
            "-c",
            "1",
            "--pool",
            "solo",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "--hostname",
            f"{queue}@%h",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _kill(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)


def _deletion(django_db_blocker, pk) -> TenantDeletion:
    return committed(django_db_blocker, lambda: TenantDeletion.objects.get(pk=pk))


def _worker_env(env0, tmp_path) -> dict[str, str]:
    db = connection.settings_dict
    return {
        **env0.env,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
        "MILLRACE_DATA_DIR": str(tmp_path / "worker-data"),
        "MILLRACE_DELETION_TOPIC_BATCH": str(BATCH),
        "MILLRACE_DELETION_LEASE_SECONDS": "3",
        "MILLRACE_CONNECT_FILE_ROOT": str(tmp_path / "connect-files"),
    }


def test_deleting_a_tenant_cuts_its_clients_and_removes_everything_despite_a_killed_worker(
    cluster, django_db_blocker, tmp_path
):
    if not os.environ.get("REDIS_URL"):
        pytest.skip("the Celery worker is another process: needs REDIS_URL, as in CI")
    env = cluster[0]
    suffix = uuid.uuid4().hex[:6]

    def setup():
        owner = get_user_model().objects.create_user(f"doomed-owner-{suffix}", password="x")
        tenant = tenancy_services.create_tenant(
            Actor.system(), slug=f"doomed-{suffix}", name="Doomed", owner=owner
        )
        return owner, tenant, _key(tenant, "app", FULL)

    owner, tenant, key = committed(django_db_blocker, setup)
    # Data on both brokers: every topic has a replica on each.
    from confluent_kafka.admin import AdminClient, NewTopic

    names = [f"t{i}-{suffix}" for i in range(TOPICS)]
    admin = AdminClient(confluent_conf(env, key))
    perf.create_topics(admin, [NewTopic(n, 1, 2) for n in names], timeout=30)
    producer = Producer(confluent_conf(env, key, acks="all", **{"message.timeout.ms": 8000}))
    for name in names:
        for i in range(5):
            producer.produce(name, b"x" * 1000, key=b"%d" % i)
    assert producer.flush(30) == 0
    # A transaction committed (transaction state in Postgres) and a group with offsets.
    txn = Producer(confluent_conf(env, key, **{"transactional.id": f"tx-{suffix}"}))
    txn.init_transactions(20)
    txn.begin_transaction()
    txn.produce(names[0], b"in a transaction")
    txn.commit_transaction(20)
    told: list[str] = []
    consumer = Consumer(
        confluent_conf(
            env,
            key,
            **{"group.id": f"g-{suffix}", "auto.offset.reset": "earliest"},
            error_cb=lambda err: told.append(str(err)),
        )
    )
    consumer.subscribe([names[0]])
    got = 0
    deadline = time.monotonic() + 30
    while got < 5 and time.monotonic() < deadline:
        got += len([m for m in consumer.consume(10, 1) if m.error() is None])
    assert got >= 5
    consumer.commit(asynchronous=False)
    from kafka import KafkaProducer

    kp = KafkaProducer(**kafka_python_conf(env, key), acks=1, request_timeout_ms=5000)
    kp.send(names[1], b"kafka-python").get(timeout=15)
    # Another tenant's producer and consumer, busy throughout.
    other_topic = f"other-{suffix}"
    perf.create_topics(
        AdminClient(confluent_conf(env, env.admin_b)), [NewTopic(other_topic, 1, 2)], timeout=30
    )
    other = Producer(confluent_conf(env, env.admin_b, acks="all"))
    other_errors: list[object] = []
    stop = threading.Event()

    def keep_producing() -> None:
        n = 0
        while not stop.is_set():
            other.produce(
                other_topic, b"%d" % n, on_delivery=lambda e, m: e and other_errors.append(e)
            )
            other.poll(0.05)
            n += 1
        other.flush(15)

    busy = threading.Thread(target=keep_producing)
    busy.start()

    topic_ids = committed(
        django_db_blocker,
        lambda: list(Topic.objects.filter(tenant=tenant).values_list("topic_id", flat=True)),
    )
    assert len(topic_ids) == TOPICS
    on_disk = [
        p.name for b in cluster for p in b.data_dir.iterdir() if p.name[:36] in map(str, topic_ids)
    ]
    assert len(on_disk) == 2 * TOPICS, on_disk

    # The owner deletes it (committed: the brokers and the worker are other processes).
    marks = [b.log_path.stat().st_size for b in cluster]
    deletion = committed(
        django_db_blocker,
        lambda: lifecycle.request_deletion(Actor(user=owner), tenant, confirm=tenant.slug),
    )
    # Within 5 s the brokers close the tenant's connections...
    wait_for(
        lambda: any(
            "closing connection" in b.log_path.read_text()[m:]
            for b, m in zip(cluster, marks, strict=True)
        ),
        5,
        "the brokers closing the tenant's connections",
    )
    # ...and its clients are refused: produce fails, new connections are refused.
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError):
        kp.send(names[1], b"after").get(timeout=10)
    refused = Producer(
        confluent_conf(
            env, key, **{"message.timeout.ms": 3000}, error_cb=lambda e: told.append(str(e))
        )
    )
    results: list[object] = []
    refused.produce(names[2], b"after", on_delivery=lambda e, m: results.append(e))
    refused.flush(10)
    assert results and results[0] is not None

    # The job, in a worker that is killed once the first batch of topics is gone.
    queue = f"deletion-test-{suffix}"
    worker_env = _worker_env(env, tmp_path)
    log = tmp_path / "worker.log"
    first = _worker(worker_env, queue, log)
    try:
        delete_tenant.apply_async(args=[str(deletion.pk)], queue=queue)
        wait_for(
            lambda: (
                _deletion(django_db_blocker, deletion.pk).progress.get("topics", {}).get("done", 0)
                >= BATCH
            ),
            60,
            "the first worker deleting the first batch of topics\n" + log.read_text()[-3000:],
        )
    finally:
        _kill(first)
    halfway = _deletion(django_db_blocker, deletion.pk)
    assert halfway.state == DeletionState.RUNNING and halfway.step == "topics"
    assert BATCH <= halfway.progress["topics"]["done"] < TOPICS
    # Its lease lapses; the beat's sweep finds it unfinished and a second worker resumes.
    wait_for(
        lambda: committed(
            django_db_blocker, lambda: deletion.pk in [d.pk for d in lifecycle.unfinished()]
        ),
        10,
        "the killed worker's lease lapsing",
    )
    second = _worker(worker_env, queue, log)
    try:
        delete_tenant.apply_async(args=[str(deletion.pk)], queue=queue)
        wait_for(
            lambda: _deletion(django_db_blocker, deletion.pk).state == DeletionState.DONE,
            90,
            "the second worker finishing the deletion\n" + log.read_text()[-3000:],
        )
    finally:
        _kill(second)
    stop.set()
    busy.join(30)
    done = _deletion(django_db_blocker, deletion.pk)
    assert done.attempts == 2 and done.tenant_id is None
    assert done.progress["topics"] == {
        **done.progress["topics"],
        "done": TOPICS,
        "total": TOPICS,
    }
    assert done.progress["groups"]["deleted"] >= 1
    assert done.progress["transactions"]["deleted"] >= 1
    assert done.progress["brokers"]["behind"] == []
    assert sorted(done.progress["brokers"]["brokers"]) == [1, 2]

    # Nothing of it on either broker's disk...
    left = [
        p.name for b in cluster for p in b.data_dir.iterdir() if p.name[:36] in map(str, topic_ids)
    ]
    assert left == []

    # ...or in Postgres, but the audit trail.
    def remains():
        pk = tenant.pk
        return {
            "tenant": Tenant.objects.filter(pk=pk).count(),
            "topics": Topic.objects.filter(tenant_id=pk).count(),
            "groups": ConsumerGroup.objects.filter(tenant_id=pk).count(),
            "offsets": CommittedOffset.objects.filter(group__tenant_id=pk).count(),
            "transactions": TransactionState.objects.filter(tenant_id=pk).count(),
            "service_accounts": ServiceAccount.objects.filter(tenant_id=pk).count(),
            "keys": ApiKey.objects.filter(tenant_id=pk).count(),
            "acls": Acl.objects.filter(tenant_id=pk).count(),
            "members": Membership.objects.filter(tenant_id=pk).count(),
            "audit": AuditEvent.objects.filter(tenant_slug=tenant.slug).count(),
            "audit_deleted": AuditEvent.objects.filter(
                tenant_slug=tenant.slug, action="tenant.deleted"
            ).count(),
        }

    counts = committed(django_db_blocker, remains)
    assert {k: v for k, v in counts.items() if not k.startswith("audit")} == {
        "tenant": 0,
        "topics": 0,
        "groups": 0,
        "offsets": 0,
        "transactions": 0,
        "service_accounts": 0,
        "keys": 0,
        "acls": 0,
        "members": 0,
    }
    assert counts["audit_deleted"] == 1 and counts["audit"] > TOPICS

    # The other tenant never noticed.
    assert other_errors == []
    reader = Consumer(
        confluent_conf(
            env, env.admin_b, **{"group.id": f"r-{suffix}", "auto.offset.reset": "earliest"}
        )
    )
    reader.subscribe([other_topic])
    seen = 0
    deadline = time.monotonic() + 20
    while seen == 0 and time.monotonic() < deadline:
        seen += len([m for m in reader.consume(100, 1) if m.error() is None])
    assert seen > 0
    reader.close()
    with contextlib.suppress(KafkaError):  # its last record was refused: flushing times out
        kp.close(timeout=1)

    def cleanup():
        AuditEvent.objects.filter(tenant_slug=tenant.slug).delete()
        get_user_model().objects.filter(pk=owner.pk).delete()

    committed(django_db_blocker, cleanup)
