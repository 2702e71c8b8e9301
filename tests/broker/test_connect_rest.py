"""Kafka Connect's REST API under a tenant's API, against a broker and a distributed
worker process running the tenant's default Connect cluster (``connect-cluster``,
``connect-configs`` ...): what the API writes, the worker runs, and what the worker
reports, the API shows. Keys act as themselves: their ACLs decide."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.broker.conftest import ROOT, confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_standalone import _create, _wait_lines
from tests.conftest import key_client

# The worker (another process) must see what the API writes, so the test commits; the
# database is flushed after it, which is why the module holds one test.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(autouse=True)
def _key_hashes(settings):
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


def _worker(kafka, tmp: Path) -> subprocess.Popen[bytes]:
    key = kafka.admin_a
    properties = tmp / "worker.properties"
    properties.write_text(
        f"bootstrap.servers={kafka.bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.username={key.key_id}\nsasl.password={key.secret}\n"
        # Kafka's sample connect-distributed.properties names: the REST API's cluster.
        "group.id=connect-cluster\nconfig.storage.topic=connect-configs\n"
        "offset.storage.topic=connect-offsets\nstatus.storage.topic=connect-status\n"
        "heartbeat.interval.ms=500\nsession.timeout.ms=3000\n"
        "scheduled.rebalance.max.delay.ms=1000\noffset.flush.interval.ms=500\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
    )
    log = tmp / "worker.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "connect", str(properties)],
        cwd=ROOT,
        env=kafka.env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while "ready in cluster" not in log.read_text():
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    return process


def _history(kafka, key: str) -> list[str]:
    """The states the status topic recorded for ``key``, oldest first."""
    import json

    from confluent_kafka import Consumer

    consumer = Consumer(
        confluent_conf(kafka, kafka.admin_a)
        | {"group.id": f"history-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
           "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe(["connect-status"])
    states: list[str] = []
    quiet_until = time.monotonic() + 5
    while time.monotonic() < quiet_until:
        for m in consumer.consume(200, 0.3):
            if m.error() is None and m.key() == key.encode() and m.value():
                states.append(json.loads(m.value())["state"])
            quiet_until = min(quiet_until, time.monotonic() + 1.0)
    consumer.close()
    return states


def _records(kafka, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_conf(kafka, kafka.admin_a) | {"group.id": "count"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def _until(check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"not reached in {timeout} s: {last!r}")


def test_connectors_over_rest_run_on_the_worker_and_report_back(kafka, tmp_path, settings):
    from confluent_kafka import Producer

    settings.MILLRACE_CONNECT_FILE_ROOT = str(tmp_path / "files")
    files = tmp_path / "files" / kafka.tenant_a
    files.mkdir(parents=True)
    topic = topic_name("rest-sink")
    _create(kafka, topic)
    api = key_client(kafka.admin_a.key_id, kafka.admin_a.secret)
    base = f"/api/v1/tenants/{kafka.tenant_a}/connect"

    plugins = api.get(f"{base}/connector-plugins").json()
    assert {"class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "type": "sink",
            "version": "1.0"} in plugins  # fmt: skip
    checked = api.put(
        f"{base}/connector-plugins/FileStreamSource/config/validate",
        {"name": "x", "file": "in.txt"},
        format="json",
    ).json()
    assert checked["name"] == "org.apache.kafka.connect.file.FileStreamSourceConnector"
    errors = {c["value"]["name"]: c["value"]["errors"] for c in checked["configs"]}
    assert errors["topic"] == ["missing required configuration"] and errors["file"] == []
    assert checked["error_count"] == 1

    # Refused before anything is written: errors name the key; a file outside the
    # tenant's directory is refused too.
    outside = {"connector.class": "FileStreamSink", "file": "/etc/passwd", "topics": topic}
    bad = api.post(f"{base}/connectors", {"name": "out", "config": outside}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error_code"] == 400 and "file:" in bad.json()["message"]
    assert api.get(f"{base}/connectors").json() == []

    worker = _worker(kafka, tmp_path)
    try:
        out = files / "out.txt"
        config = {"connector.class": "FileStreamSink", "file": str(out), "topics": topic}
        created = api.post(f"{base}/connectors", {"name": "out", "config": config}, format="json")
        assert created.status_code == 201, created.content
        # It runs as the calling key unless the config names another (kafka.api.key).
        stored = {**config, "name": "out", "kafka.api.key": kafka.admin_a.key_id}
        assert created.json() == {"name": "out", "config": stored, "tasks": [], "type": "sink"}
        again = api.post(f"{base}/connectors", {"name": "out", "config": config}, format="json")
        assert again.status_code == 409 and again.json()["error_code"] == 409

        def running(count: int = 1):
            status = api.get(f"{base}/connectors/out/status").json()
            ok = status["connector"]["state"] == "RUNNING" and len(status["tasks"]) == count
            return status if ok and all(t["state"] == "RUNNING" for t in status["tasks"]) else None

        status = _until(running)
        assert status["type"] == "sink" and status["tasks"][0]["worker_id"]
        producer = Producer(confluent_conf(kafka, kafka.admin_a))
        for i in range(20):
            producer.produce(topic, f"v{i}".encode())
        producer.flush(30)
        assert _wait_lines(out, 20) == [f"v{i}" for i in range(20)]

        # KIP-875: a sink's offsets are its group's, committed once the lines are on disk.
        sink_offsets = {"offsets": [{"partition": {"kafka_topic": topic, "kafka_partition": 0},
                                     "offset": {"kafka_offset": 20}}]}  # fmt: skip
        _until(lambda: api.get(f"{base}/connectors/out/offsets").json() == sink_offsets)

        # A source created with PUT (201): a relative file name is placed in the tenant's
        # directory; its offsets come from connect-offsets.
        lines_topic = topic_name("rest-lines")
        _create(kafka, lines_topic)
        (files / "in.txt").write_text("a\nb\nc\n")
        put = api.put(f"{base}/connectors/src/config", {"connector.class": "FileStreamSource",
                      "file": "in.txt", "topic": lines_topic}, format="json")  # fmt: skip
        assert put.status_code == 201, put.content
        assert put.json()["config"]["file"] == str((files / "in.txt").resolve())
        source_offsets = {"offsets": [{"partition": {"filename": str((files / "in.txt").resolve())},
                                       "offset": {"position": 6}}]}  # fmt: skip
        _until(lambda: api.get(f"{base}/connectors/src/offsets").json() == source_offsets)
        # KIP-558: the topics each connector used.
        _until(lambda: api.get(f"{base}/connectors/src/topics").json()
               == {"src": {"topics": [lines_topic]}})  # fmt: skip
        assert api.get(f"{base}/connectors/out/topics").json() == {"out": {"topics": [topic]}}
        # KIP-875: offsets change only while the connector is stopped.
        path = str((files / "in.txt").resolve())
        alter = {"offsets": [{"partition": {"filename": path}, "offset": {"position": 2}}]}
        early = api.patch(f"{base}/connectors/src/offsets", alter, format="json")
        assert early.status_code == 400 and "STOPPED state" in early.json()["message"]
        # Stopped: no tasks, and the connector says so.
        assert api.put(f"{base}/connectors/src/stop").status_code == 202
        _until(lambda: (lambda s: s["connector"]["state"] == "STOPPED" and s["tasks"] == [])(
            api.get(f"{base}/connectors/src/status").json()))  # fmt: skip
        bad_body = api.patch(f"{base}/connectors/src/offsets", {"offsets": []}, format="json")
        assert bad_body.status_code == 400
        altered = api.patch(f"{base}/connectors/src/offsets", alter, format="json")
        assert altered.status_code == 200, altered.content
        assert altered.json() == {
            "message": "The offsets for this connector have been altered successfully"}  # fmt: skip
        assert api.get(f"{base}/connectors/src/offsets").json() == alter
        # Resumed, it runs again from byte 2: "b" and "c" a second time, then offset 6.
        assert api.put(f"{base}/connectors/src/resume").status_code == 202
        _until(lambda: (lambda s: [t["state"] for t in s["tasks"]] == ["RUNNING"])(
            api.get(f"{base}/connectors/src/status").json()))  # fmt: skip
        _until(lambda: api.get(f"{base}/connectors/src/offsets").json() == source_offsets)
        assert _records(kafka, lines_topic) == 5
        replaced = api.put(f"{base}/connectors/src/config", {"connector.class": "FileStreamSource",
                           "file": "in.txt", "topic": lines_topic, "batch.size": "10"},
                           format="json")  # fmt: skip
        assert replaced.status_code == 200 and replaced.json()["config"]["batch.size"] == "10"
        assert "batch.size" in api.get(f"{base}/connectors/src/config").json()

        listed = api.get(f"{base}/connectors?expand=status&expand=info").json()
        assert listed["out"]["info"]["tasks"] == [{"connector": "out", "task": 0}]
        assert listed["out"]["status"]["connector"]["state"] == "RUNNING"

        # Pause and resume: the worker's tasks report it.
        assert api.put(f"{base}/connectors/out/pause").status_code == 202
        _until(lambda: api.get(f"{base}/connectors/out/status").json()["tasks"][0]["state"]
               == "PAUSED")  # fmt: skip
        assert api.put(f"{base}/connectors/out/resume").status_code == 202
        _until(running)

        # PATCH (KIP-477): two tasks now.
        patched = api.patch(f"{base}/connectors/out/config", {"tasks.max": "2"}, format="json")
        assert patched.status_code == 200 and patched.json()["config"]["tasks.max"] == "2"
        _until(lambda: running(2))
        tasks = api.get(f"{base}/connectors/out/tasks").json()
        assert [t["id"] for t in tasks] == [{"connector": "out", "task": i} for i in (0, 1)]
        assert api.get(f"{base}/connectors/out/config").json()["tasks.max"] == "2"

        # Restarts: the worker stops and starts the tasks (their status history shows it).
        before = _history(kafka, "status-task-out-0")
        restarted = api.post(f"{base}/connectors/out/restart?includeTasks=true")
        assert restarted.status_code == 202
        assert {t["state"] for t in restarted.json()["tasks"]} == {"RESTARTING"}
        _until(lambda: _history(kafka, "status-task-out-0")[len(before):][-2:]
               == ["UNASSIGNED", "RUNNING"])  # fmt: skip
        before = _history(kafka, "status-task-out-1")
        assert api.post(f"{base}/connectors/out/tasks/1/restart").status_code == 204
        _until(lambda: _history(kafka, "status-task-out-1")[len(before):][-2:]
               == ["UNASSIGNED", "RUNNING"])  # fmt: skip
        _until(lambda: running(2))
        assert api.get(f"{base}/connectors/out/tasks/7/status").status_code == 404

        # A sink's offsets are its group's: altered while stopped, the sink writes the
        # records from there again once resumed; reset, the group is gone.
        assert api.put(f"{base}/connectors/out/stop").status_code == 202
        _until(lambda: api.get(f"{base}/connectors/out/status").json()["tasks"] == [])
        rewind = {"offsets": [{"partition": {"kafka_topic": topic, "kafka_partition": 0},
                               "offset": {"kafka_offset": 15}}]}  # fmt: skip
        wrong = {"offsets": [{"partition": {"kafka_topic": topic}, "offset": {"kafka_offset": 1}}]}
        assert api.patch(f"{base}/connectors/out/offsets", wrong, format="json").status_code == 400
        # (the sink's consumers may take a moment to leave the group)
        _until(lambda: api.patch(f"{base}/connectors/out/offsets", rewind,
                                 format="json").status_code == 200)  # fmt: skip
        assert api.get(f"{base}/connectors/out/offsets").json() == rewind
        assert api.put(f"{base}/connectors/out/resume").status_code == 202
        lines = _wait_lines(out, 25)
        assert lines[20:] == [f"v{i}" for i in range(15, 20)]
        assert api.put(f"{base}/connectors/out/stop").status_code == 202
        _until(lambda: api.get(f"{base}/connectors/out/status").json()["tasks"] == [])
        _until(lambda: api.delete(f"{base}/connectors/out/offsets").status_code == 200)
        assert api.get(f"{base}/connectors/out/offsets").json() == {"offsets": []}
        assert api.put(f"{base}/connectors/src/stop").status_code == 202
        _until(lambda: api.get(f"{base}/connectors/src/status").json()["tasks"] == [])
        reset = api.delete(f"{base}/connectors/src/offsets")
        assert reset.json() == {
            "message": "The offsets for this connector have been reset successfully"}  # fmt: skip
        assert api.get(f"{base}/connectors/src/offsets").json() == {"offsets": []}
        assert api.put(f"{base}/connectors/src/topics/reset").status_code == 200
        assert api.get(f"{base}/connectors/src/topics").json() == {"src": {"topics": []}}
        assert api.put(f"{base}/connectors/out/resume").status_code == 202
        _until(lambda: running(2))

        # Keys act as themselves: a key that may not read the Connect topics is refused,
        # and another tenant's key does not see this tenant.
        reader = key_client(kafka.reader_a.key_id, kafka.reader_a.secret)
        refused = reader.get(f"{base}/connectors")
        assert refused.status_code == 403 and refused.json()["error_code"] == 403
        outsider = key_client(kafka.admin_b.key_id, kafka.admin_b.secret)
        # Every endpoint: another tenant's key finds no such tenant, and changes nothing.
        body = {"name": "x", "config": {"connector.class": "FileStreamSink", "topics": topic}}
        for method, path, data in [
            ("get", "connectors", None), ("post", "connectors", body),
            ("get", "connectors/out", None), ("delete", "connectors/out", None),
            ("get", "connectors/out/config", None), ("put", "connectors/out/config", {}),
            ("patch", "connectors/out/config", {}), ("get", "connectors/out/status", None),
            ("post", "connectors/out/restart", None), ("put", "connectors/out/pause", None),
            ("put", "connectors/out/resume", None), ("put", "connectors/out/stop", None),
            ("get", "connectors/out/offsets", None), ("patch", "connectors/out/offsets", {}),
            ("delete", "connectors/out/offsets", None), ("get", "connectors/out/topics", None),
            ("put", "connectors/out/topics/reset", None), ("get", "connectors/out/tasks", None),
            ("get", "connectors/out/tasks/0/status", None),
            ("post", "connectors/out/tasks/0/restart", None), ("get", "connector-plugins", None),
            ("put", "connector-plugins/FileStreamSink/config/validate", {}),
        ]:  # fmt: skip
            answer = getattr(outsider, method)(f"{base}/{path}", data, format="json")
            assert answer.status_code == 404, (method, path, answer.status_code)
        _until(lambda: running(2))  # and the connector runs on, untouched

        # The tenant's Connect limits: a third connector is refused at two.
        from control_plane.tenancy.models import Tenant

        Tenant.objects.filter(slug=kafka.tenant_a).update(max_connectors=2)
        third = {"connector.class": "FileStreamSink", "file": "third.txt", "topics": topic}
        over = api.post(f"{base}/connectors", {"name": "third", "config": third}, format="json")
        assert over.status_code == 400 and "may have 2 connectors" in over.json()["message"]

        # Delete: gone from the API and from the worker.
        assert api.delete(f"{base}/connectors/out").status_code == 204
        missing = api.get(f"{base}/connectors/out")
        assert missing.status_code == 404
        assert missing.json() == {"error_code": 404, "message": "Connector out not found"}
        for task in (0, 1):  # the worker stopped both tasks
            _until(lambda t=task: _history(kafka, f"status-task-out-{t}")[-1:] == ["UNASSIGNED"])
        producer.produce(topic, b"after-delete")
        producer.flush(30)
        time.sleep(2)
        assert "after-delete" not in out.read_text()

        # Every change is in the tenant's audit log, with who made it.
        from control_plane.audit.models import AuditEvent

        actions = set(AuditEvent.objects.filter(action__startswith="connect.")
                      .values_list("action", flat=True))  # fmt: skip
        assert {"connect.create", "connect.update", "connect.pause", "connect.resume",
                "connect.stop", "connect.restart", "connect.restart_task",
                "connect.alter_offsets", "connect.reset_offsets", "connect.reset_topics",
                "connect.delete"} <= actions  # fmt: skip
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
