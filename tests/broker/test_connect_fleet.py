"""The platform's Connect fleet (``manage.py connect --fleet``) against a broker: it runs
the Connect cluster of each tenant that uses Connect, with no worker of the tenant's own,
and each connector's clients act as the API key its config names, so that key's ACLs
decide what the connector may do. Its own principal may touch only the Connect cluster's
topics and group (tests/broker/test_connect_principal.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.broker.conftest import ROOT, confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_rest import _key_hashes, _records, _until  # noqa: F401 - a fixture
from tests.broker.test_connect_standalone import _create, _wait_lines
from tests.conftest import key_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _fleet(kafka, tmp: Path, files: Path) -> subprocess.Popen[bytes]:
    properties = tmp / "fleet.properties"
    properties.write_text(
        f"bootstrap.servers={kafka.bootstrap}\n"
        "heartbeat.interval.ms=500\nsession.timeout.ms=3000\n"
        "scheduled.rebalance.max.delay.ms=1000\noffset.flush.interval.ms=500\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "fleet.interval.seconds=1\n"
    )
    log = tmp / "fleet.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "connect", "--fleet", str(properties)],
        cwd=ROOT,
        env={**kafka.env, "MILLRACE_CONNECT_FILE_ROOT": str(files)},
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while "connect fleet ready" not in log.read_text():
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    return process


def test_the_fleet_runs_a_tenants_connectors_as_the_keys_they_name(kafka, tmp_path, settings):
    from confluent_kafka import Producer

    root = tmp_path / "files"
    settings.MILLRACE_CONNECT_FILE_ROOT = str(root)
    files = root / kafka.tenant_a
    files.mkdir(parents=True)
    topic, denied_topic = topic_name("fleet-in"), topic_name("fleet-denied")
    _create(kafka, topic)
    _create(kafka, denied_topic)
    api = key_client(kafka.admin_a.key_id, kafka.admin_a.secret)
    base = f"/api/v1/tenants/{kafka.tenant_a}/connect"

    # Created before any worker runs: the tenant's Connect cluster now exists.
    sink = {"connector.class": "FileStreamSink", "file": "out.txt", "topics": topic}
    made = api.post(f"{base}/connectors", {"name": "out", "config": sink}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["config"]["kafka.api.key"] == kafka.admin_a.key_id  # the caller's
    # A source run as the reader's key (its secret proves the caller may): that key may
    # not write the topic, so the connector can do no more than the key.
    (files / "in.txt").write_text("a\nb\n")
    reader = kafka.reader_a
    source = {"connector.class": "FileStreamSource", "file": "in.txt", "topic": denied_topic,
              "kafka.api.key": reader.key_id, "kafka.api.secret": reader.secret}  # fmt: skip
    made = api.post(f"{base}/connectors", {"name": "as-reader", "config": source}, format="json")
    assert made.status_code == 201, made.content
    assert "kafka.api.secret" not in made.json()["config"]  # checked, never kept
    # And a sink run as the reader's key, which may read neither the topic nor the group.
    reading = {**sink, "file": "reader.txt", "kafka.api.key": reader.key_id,
               "kafka.api.secret": reader.secret}  # fmt: skip
    made = api.post(f"{base}/connectors", {"name": "sink-as-reader", "config": reading},
                    format="json")  # fmt: skip
    assert made.status_code == 201, made.content
    # Naming another account's key without its secret is refused, nothing written.
    guessed = {**source, "kafka.api.secret": None}
    refused = api.post(f"{base}/connectors", {"name": "guess", "config": guessed}, format="json")
    assert refused.status_code == 400 and "kafka.api.secret" in refused.json()["message"]

    fleet = _fleet(kafka, tmp_path, root)
    try:

        def state(name: str) -> dict:
            return api.get(f"{base}/connectors/{name}/status").json()

        running = _until(lambda: (lambda s: s if [t["state"] for t in s.get("tasks", [])]
                                  == ["RUNNING"] else None)(state("out")))  # fmt: skip
        assert running["connector"]["state"] == "RUNNING"
        producer = Producer(confluent_conf(kafka, kafka.admin_a))
        for value in (b"one", b"two"):
            producer.produce(topic, value)
        producer.flush(30)
        assert _wait_lines(files / "out.txt", 2) == ["one", "two"]

        failed = _until(lambda: (lambda s: s if [t["state"] for t in s.get("tasks", [])]
                                 == ["FAILED"] else None)(state("as-reader")))  # fmt: skip
        # Refused for the key's rights: its producer id (IdempotentWrite) or the topic.
        assert "authorization failed" in failed["tasks"][0]["trace"].lower(), failed
        assert _records(kafka, denied_topic) == 0
        refused = _until(lambda: (lambda s: s if [t["state"] for t in s.get("tasks", [])]
                                  == ["FAILED"] else None)(state("sink-as-reader")))  # fmt: skip
        assert "authorization" in refused["tasks"][0]["trace"].lower(), refused
        assert not (files / "reader.txt").exists() or not (files / "reader.txt").read_text()

        # Tenant B has no Connect cluster yet: an admin creates a connector in the console
        # (members may not create topics; the platform makes the cluster's), and the fleet
        # runs it too, as the key the admin picked.
        other = topic_name("fleet-b")
        _create(kafka, other, key=kafka.admin_b)
        (root / kafka.tenant_b).mkdir()
        console = _console_admin(kafka.tenant_b)
        created = console.post(f"/t/{kafka.tenant_b}/create-connector/", {
            "plugin": "FileStreamSink", "name": "b-out", "config:file": "b.txt",
            "config:topics": other, "config:kafka.api.key": kafka.admin_b.key_id,
            "config:value.converter": "org.apache.kafka.connect.storage.StringConverter",
        })  # fmt: skip
        assert created.status_code == 302, created.content.decode()[-2000:]
        producer = Producer(confluent_conf(kafka, kafka.admin_b))
        producer.produce(other, b"from b")
        producer.flush(30)
        assert _wait_lines(root / kafka.tenant_b / "b.txt", 1) == ["from b"]
        assert not (files / "b.txt").exists()  # in B's directory only
    finally:
        fleet.send_signal(signal.SIGTERM)
        assert fleet.wait(60) == 0


def _console_admin(tenant_slug: str):
    from django.test import Client

    from control_plane.tenancy import services as tenancy_services
    from control_plane.tenancy.models import Role, Tenant
    from tests.conftest import SYSTEM, make_user

    user = make_user(f"fleet-admin-{time.monotonic_ns()}")
    tenant = Tenant.objects.get(slug=tenant_slug)
    tenancy_services.add_member(SYSTEM, tenant, user=user, role=Role.ADMIN)
    client = Client()
    client.force_login(user)
    return client
