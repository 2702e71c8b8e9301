"""The console's Connect pages against a broker and a distributed worker process running
the tenant's Connect cluster (``connect-cluster``, as the REST API's): the empty state
before any worker ran, a connector created from a plugin's form (a field error first),
its tasks RUNNING on the worker, pause and resume followed by the worker, restarts,
the dead-letter count, secrets masked, deletion from a confirmation page, every change
in the audit log; viewers look but cannot change, other tenants' members get 404."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import uuid

import pytest
from confluent_kafka import Producer
from django.test import Client

from control_plane.audit.models import AuditEvent
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role, Tenant
from tests.broker import conftest as broker_conftest
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_rest import _until, _worker
from tests.broker.test_connect_standalone import _create, _wait_lines
from tests.conftest import SYSTEM, make_user

# The worker (another process) and the broker (which checks the console principal's
# membership) must see what the test writes, so it commits; the database is flushed after
# it, which is why the module holds one test.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

kafka = broker_conftest.kafka  # the module-scoped broker fixture
CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


@pytest.fixture(autouse=True)
def _key_hashes(settings):
    # The broker fixture's keys were hashed with Argon2 before tests/conftest.py switched to
    # a fast hasher; the worker's key must still verify.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


def _members(kafka) -> dict[str, Client]:
    suffix = uuid.uuid4().hex[:6]
    tenant = Tenant.objects.get(slug=kafka.tenant_a)
    out = {}
    for name, role in (("viewer", Role.VIEWER), ("dev", Role.DEVELOPER), ("admin", Role.ADMIN)):
        user = make_user(f"{name}-{suffix}")
        tenancy_services.add_member(SYSTEM, tenant, user=user, role=role)
        out[name] = Client()
        out[name].force_login(user)
    outsider = make_user(f"out-{suffix}")
    tenancy_services.add_member(
        SYSTEM, Tenant.objects.get(slug=kafka.tenant_b), user=outsider, role=Role.OWNER
    )
    out["outsider"] = Client()
    out["outsider"].force_login(outsider)
    return out


def _html(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def _task_states(html: str) -> list[str]:
    table = html.split('id="tasks"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<span class="badge[^"]*">([A-Z]+)</span>', table)


def test_connect_pages(kafka, tmp_path, settings):
    settings.MILLRACE_CONNECT_FILE_ROOT = str(tmp_path / "files")
    files = tmp_path / "files" / kafka.tenant_a
    files.mkdir(parents=True)
    topic, dlq = topic_name("console-in"), topic_name("console-dlq")
    _create(kafka, topic)
    members = _members(kafka)
    viewer, dev, admin, outsider = (members[k] for k in ("viewer", "dev", "admin", "outsider"))
    base = f"/t/{kafka.tenant_a}/connect/"
    create = f"/t/{kafka.tenant_a}/create-connector/"

    # No worker has run: the cluster has no topics, and the page says how to start one.
    empty = _html(viewer, base)
    assert 'id="no-cluster"' in empty and "group.id=connect-cluster" in empty
    assert f'href="{base}"' in empty  # the nav link
    assert outsider.get(base).status_code == 404
    assert viewer.get(create).status_code == 403

    worker = _worker(kafka, tmp_path)
    try:
        listing = _html(dev, base)
        assert "No connectors yet" in listing and create in listing
        assert create not in _html(viewer, base)

        # The plugin's form: its keys with their docs and defaults, passwords hidden.
        chooser = _html(dev, create)
        assert "?plugin=FileStreamSink" in chooser and "?plugin=HttpSink" in chooser
        form = _html(dev, create + "?plugin=FileStreamSink")
        assert 'name="config:file"' in form and 'name="config:topics"' in form
        assert "file to append to" in form and 'placeholder="2000"' not in form
        assert 'name="config:errors.deadletterqueue.topic.name"' in form
        http_form = _html(dev, create + "?plugin=HttpSink")
        assert re.search(r'type="password" name="config:[^"]*password"', http_form)

        # Refused: the error beside the field it is about; nothing written.
        fields = {
            "plugin": "FileStreamSink",
            "name": "out",
            "config:file": "out.txt",
            "config:value.converter": CONVERTER,
            "config:errors.tolerance": "all",
            "config:errors.deadletterqueue.topic.name": dlq,
            "config:errors.deadletterqueue.topic.replication.factor": "1",
            "extra": "value.converter.schemas.enable=false\nsink.api.password=hunter2\n",
            # A developer proves the key the connector runs as with its secret.
            "config:kafka.api.key": kafka.admin_a.key_id,
            "config:kafka.api.secret": kafka.admin_a.secret,
        }
        unproved = {k: v for k, v in fields.items() if k != "config:kafka.api.secret"}
        html = dev.post(create, {**unproved, "config:topics": topic}).content.decode()
        assert 'id="config-kafka-api-secret-error"' in html and "only an admin or owner" in html
        wrong = dev.post(create, {**fields, "config:topics": topic,
                                  "config:kafka.api.secret": "nope"}).content.decode()  # fmt: skip
        assert 'id="config-kafka-api-secret-error"' in wrong and "invalid API key" in wrong
        refused = dev.post(create, fields)
        assert refused.status_code == 400
        html = refused.content.decode()
        assert 'id="config-topics-error"' in html and "exactly one of topics" in html
        assert 'value="out.txt"' in html and "hunter2" in html  # kept as typed
        outside = dev.post(create, {**fields, "config:topics": topic, "config:file": "/etc/x"})
        assert 'id="config-file-error"' in outside.content.decode()
        assert "No connectors yet" in _html(dev, base)
        assert viewer.post(create, {**fields, "config:topics": topic}).status_code == 403

        # Or a whole config pasted as JSON or properties, checked the same way.
        unnamed = dev.post(create, {"name": "p", "extra": f"topics={topic}\n"}).content.decode()
        assert 'id="other-errors"' in unnamed and "connector.class" in unnamed
        broken = dev.post(create, {"name": "p", "extra": "{nope"}).content.decode()
        assert 'id="extra-error"' in broken and "not valid JSON" in broken
        key = kafka.admin_a
        pasted = {"name": "pasted", "config": {"connector.class": "FileStreamSink",
                                               "topics": topic, "file": "pasted.txt",
                                               "kafka.api.key": key.key_id,
                                               "kafka.api.secret": key.secret}}  # fmt: skip
        made = dev.post(create, {"name": "", "extra": json.dumps(pasted)})
        assert made.status_code == 302 and made["Location"] == f"{base}pasted/"

        created = dev.post(create, {**fields, "config:topics": topic})
        assert created.status_code == 302, created.content.decode()[-3000:]
        detail = f"{base}out/"
        assert created["Location"] == detail
        taken = dev.post(create, {**fields, "config:topics": topic})
        assert 'id="name-error"' in taken.content.decode() and "already exists" in (
            taken.content.decode()
        )

        # The worker runs it: the page shows its task RUNNING and the worker's id.
        page = _until(lambda: (lambda h: h if _task_states(h) == ["RUNNING"] else None)(
            _html(viewer, detail)))  # fmt: skip
        assert re.search(r'id="connector-state"><span class="badge ok">RUNNING', page)
        worker_id = re.search(r'<td class="name">([^<\u2013]+)</td>', page.split('id="tasks"')[1])
        assert worker_id and worker_id.group(1).strip()
        # Secrets are masked; the rest of the config is shown. The key's secret is not kept.
        assert "hunter2" not in page and "••••" in page
        assert kafka.admin_a.key_id in page and kafka.admin_a.secret not in page
        assert str((files / "out.txt").resolve()) in page
        row = _html(viewer, base)
        assert re.search(r">out</a>.*FileStreamSinkConnector.*RUNNING.*1 / 1", row, re.S)

        # Records arrive; the bad one goes to the dead-letter queue, counted on the page.
        producer = Producer(confluent_conf(kafka, kafka.admin_a))
        for value in (b'{"n": 1}', b"not json", b'{"n": 2}'):
            producer.produce(topic, value)
        producer.flush(30)
        assert len(_wait_lines(files / "out.txt", 2)) == 2
        page = _until(lambda: (lambda h: h if "<strong>1</strong> record" in h else None)(
            _html(viewer, detail)))  # fmt: skip
        assert f'href="/t/{kafka.tenant_a}/topics/{dlq}/"' in page
        assert f'href="/t/{kafka.tenant_a}/topics/{topic}/"' in page  # an active topic
        offset = json.dumps({"kafka_offset": 3})
        _until(lambda: offset.replace('"', "&quot;") in _html(viewer, detail))

        # Viewers see no actions and are refused them.
        for control in (
            "Pause",
            "Restart connector",
            "Delete connector…",
            'aria-label="Restart task 0"',
        ):
            assert control not in page
        assert viewer.post(f"{detail}state/", {"action": "pause"}).status_code == 403
        assert viewer.post(f"{detail}tasks/0/restart/").status_code == 403
        assert viewer.get(f"{detail}delete/").status_code == 403
        assert viewer.post(f"{detail}delete/").status_code == 403
        # Another tenant's member finds nothing.
        for url in (detail, f"{detail}delete/"):
            assert outsider.get(url).status_code == 404
        assert outsider.post(f"{detail}state/", {"action": "pause"}).status_code == 404
        assert _html(dev, f"{base}nothing-here/", 404)

        # Pause and resume: the worker follows, the page shows it.
        dev_page = _html(dev, detail)
        for control in (
            "Pause",
            "Restart connector",
            "Delete connector…",
            'aria-label="Restart task 0"',
        ):
            assert control in dev_page
        paused = dev.post(f"{detail}state/", {"action": "pause"}, follow=True)
        assert "Connector out paused" in paused.content.decode()
        _until(lambda: _task_states(_html(viewer, detail)) == ["PAUSED"])
        assert 'value="resume"' in _html(dev, detail)
        dev.post(f"{detail}state/", {"action": "resume"})
        _until(lambda: _task_states(_html(viewer, detail)) == ["RUNNING"])
        restarted = dev.post(f"{detail}tasks/0/restart/", follow=True)
        assert "Restarting task 0 of out" in restarted.content.decode()
        assert dev.post(f"{detail}tasks/9/restart/").status_code == 404  # no such task
        dev.post(f"{detail}restart/", {"include_tasks": "1"})
        _until(lambda: _task_states(_html(viewer, detail)) == ["RUNNING"])

        # Delete from a confirmation page: gone from the list and the worker.
        confirm = _html(dev, f"{detail}delete/")
        assert "Delete connector out?" in confirm and "1 task(s)" in confirm
        deleted = dev.post(f"{detail}delete/")
        assert deleted.status_code == 302 and deleted["Location"] == base
        assert dev.post(f"{base}pasted/delete/").status_code == 302
        assert "No connectors yet" in _html(viewer, base)
        assert viewer.get(detail).status_code == 404

        # Every change is audited as the member who made it, secrets hidden.
        events = AuditEvent.objects.filter(action__startswith="connect.", object_repr="out")
        assert {"connect.create", "connect.pause", "connect.resume", "connect.restart_task",
                "connect.restart", "connect.delete"} <= set(events.values_list(
                    "action", flat=True))  # fmt: skip
        made = events.get(action="connect.create")
        assert made.actor.startswith("dev-") and made.after["sink.api.password"] == "[hidden]"
        assert "hunter2" not in json.dumps(list(events.values("before", "after")))
        audit = _html(admin, f"/t/{kafka.tenant_a}/audit/?action=connect.delete")
        assert "connect.delete" in audit
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
