"""A real broker process on loopback, backed by this test run's Postgres database.

Module-scoped: tenants, service accounts, keys and ACLs are committed outside the
per-test transactions (the broker is another process and must see them), and removed at
the end. Needs Postgres (CI); on the embedded SQLite default these tests are skipped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from django.db import OperationalError, connection, transaction

from control_plane.access import services as access_services
from control_plane.audit.models import AuditEvent
from control_plane.catalog.models import Broker, Topic
from control_plane.core.actor import Actor
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Tenant

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = Actor.system()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Key:
    key_id: str
    secret: str
    principal: str


@dataclass
class KafkaEnv:
    bootstrap: str
    port: int
    tenant_a: str
    tenant_b: str
    admin_a: Key  # full access in tenant A
    reader_a: Key  # Read/Describe on topics starting "shared-" only
    admin_b: Key  # full access in tenant B
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    data_dir: Path | None = None
    log_path: Path | None = None
    broker_id: int = 1
    advertised_port: int | None = None  # clients and other brokers reach it there (a proxy)
    allow_anonymous: bool = False  # the development listener
    metrics_port: int | None = None  # /metrics, /healthz, /readyz

    def http(self, path: str) -> tuple[int, str]:
        """(status, body) of GET ``path`` on the broker's metrics port."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=10
            ) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def log_tail(self) -> str:
        return self.log_path.read_text()[-4000:] if self.log_path else ""


def _key(tenant: Tenant, name: str, acls: list[tuple[str, str, str, str]]) -> Key:
    sa = access_services.create_service_account(SYSTEM, tenant, name=name)
    for rtype, ptype, rname, op in acls:
        access_services.create_acl(
            SYSTEM,
            tenant,
            principal=sa.principal,
            resource_type=rtype,
            pattern_type=ptype,
            resource_name=rname,
            operation=op,
            permission="allow",
        )
    created = access_services.create_api_key(SYSTEM, sa)
    return Key(created.api_key.key_id, created.secret, sa.principal)


FULL = [
    ("cluster", "literal", "kafka-cluster", "all"),
    ("topic", "literal", "*", "all"),
    ("group", "literal", "*", "all"),
    ("transactional_id", "literal", "*", "all"),
]


def start_broker(env: KafkaEnv) -> None:
    assert env.log_path is not None and env.data_dir is not None
    seen = env.log_path.stat().st_size if env.log_path.exists() else 0
    log = open(env.log_path, "ab")
    env.process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "broker",
            "--id",
            str(env.broker_id),
            "--port",
            str(env.port),
            "--data-dir",
            str(env.data_dir),
            *(["--advertised-port", str(env.advertised_port)] if env.advertised_port else []),
            *(["--allow-anonymous"] if env.allow_anonymous else []),
            *(["--metrics-port", str(env.metrics_port)] if env.metrics_port else []),
        ],
        cwd=ROOT,
        env=env.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if env.process.poll() is not None:
            raise AssertionError(f"broker exited:\n{env.log_tail()}")
        if "ready on" in env.log_path.read_text()[seen:]:  # this start's line, not the last
            return
        time.sleep(0.2)
    raise AssertionError(f"broker did not start:\n{env.log_tail()}")


def stop_broker(env: KafkaEnv, sig: str = "term") -> int:
    assert env.process is not None
    if sig == "kill":
        env.process.kill()
    else:
        env.process.terminate()
    return env.process.wait(timeout=30)


def _delete_tenant(tenant: Tenant, attempts: int = 5) -> None:
    """Remove a test tenant and everything of it. A broker's database session can
    outlive its killed process for a moment, still finishing a statement (a transaction
    coordinator settling offsets locks the transaction's row, then its offsets: the
    cascade's order reversed); Postgres then picks one side of the deadlock, and this
    tries again."""
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                Topic.objects.filter(tenant=tenant).delete()
                # The brokers' changes were committed: later tests on this database must
                # not find their audit trail either.
                AuditEvent.objects.filter(tenant_slug=tenant.slug).delete()
                tenant.delete()
            return
        except OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)


def _brokers(django_db_blocker, tmp_path_factory, count, extra_env=None, advertised_ports=None):
    """Tenants, keys and ``count`` broker processes (ids 1..count) on one database.

    ``advertised_ports`` (one per broker): each broker advertises that port instead of the
    one it listens on, and the bootstrap list names them (a proxy in front of each broker).
    """
    if connection.vendor != "postgresql":
        pytest.skip("broker integration tests need Postgres (set DATABASE_URL), as in CI")
    suffix = uuid.uuid4().hex[:6]
    with django_db_blocker.unblock():
        a = tenancy_services.create_tenant(SYSTEM, slug=f"acme-{suffix}", name="Acme")
        b = tenancy_services.create_tenant(SYSTEM, slug=f"globex-{suffix}", name="Globex")
        keys = {
            "admin_a": _key(a, "admin", FULL),
            "reader_a": _key(a, "reader", [("topic", "prefixed", "shared-", "read")]),
            "admin_b": _key(b, "admin", FULL),
        }
        name = connection.settings_dict["NAME"]
    tmp = tmp_path_factory.mktemp("broker")
    ports = [free_port() for _ in range(count)]
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/x")
    env = {
        **os.environ,
        "DATABASE_URL": base.rsplit("/", 1)[0] + "/" + name,
        "MILLRACE_DATA_DIR": str(tmp / "data"),
        "PYTHONUNBUFFERED": "1",
        # The control plane (this process) asks the broker as the internal principal.
        "MILLRACE_INTERNAL_SECRET": settings.MILLRACE_INTERNAL_SECRET,
        # Kafka's defaults (6 s, 3 s) would make every group test wait; the coordinator's
        # behaviour is the same with shorter ones.
        "MILLRACE_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
        "MILLRACE_GROUP_INITIAL_REBALANCE_DELAY_MS": "200",
        "MILLRACE_BROKER_LEASE_SECONDS": "10",  # see tests/conftest.py
        # Every test client shares 127.0.0.1: tests that fail logins on purpose would slow
        # each other's down. The back-off itself is tested in test_connection_limits.py.
        "MILLRACE_BROKER_FAILED_AUTH_MAX_DELAY_MS": "100",
        # stop_broker waits 30 s for the process: the leadership handover must fit.
        "MILLRACE_CONTROLLED_SHUTDOWN_TIMEOUT_SECONDS": "10",
        # Client versions reach the console within a second (tests read them there).
        "MILLRACE_BROKER_CLIENT_REPORT_SECONDS": "1",
        **(extra_env or {}),
    }
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in advertised_ports or ports)
    envs = [
        KafkaEnv(
            bootstrap,
            port,
            a.slug,
            b.slug,
            env=env,
            data_dir=tmp / f"broker-{i}",
            log_path=tmp / f"broker-{i}.log",
            broker_id=i,
            advertised_port=advertised_ports[i - 1] if advertised_ports else None,
            metrics_port=free_port(),
            **keys,
        )
        for i, port in enumerate(ports, start=1)
    ]
    try:
        for info in envs:
            start_broker(info)
        yield envs
    finally:
        for info in envs:
            if info.process and info.process.poll() is None:
                stop_broker(info)
        with django_db_blocker.unblock():
            for tenant in (a, b):
                _delete_tenant(tenant)
            # The brokers registered in this worker's test database: later tests there
            # must not see (now stopped) brokers.
            Broker.objects.all().delete()


@pytest.fixture(scope="module")
def kafka(django_db_setup, django_db_blocker, tmp_path_factory):
    for envs in _brokers(django_db_blocker, tmp_path_factory, 1):
        yield envs[0]


def confluent_conf(env: KafkaEnv, key: Key, mechanism: str = "SCRAM-SHA-256", **extra):
    return {
        "bootstrap.servers": env.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": key.key_id,
        "sasl.password": key.secret,
        **extra,
    }


def kafka_python_conf(env: KafkaEnv, key: Key, mechanism: str = "SCRAM-SHA-256"):
    return {
        "bootstrap_servers": env.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": key.key_id,
        "sasl_plain_password": key.secret,
    }
