"""`manage.py up` on the embedded default (SQLite, no Redis), as a newcomer runs it.

Starts the real command as a subprocess on a free port, waits for the banner, signs in to
the console with the printed one-time password, checks the worker runs a task enqueued
through the filesystem transport by another process, then stops everything with SIGINT
(Ctrl-C) and expects a clean exit.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_ENV_DROP = {"DATABASE_URL", "REDIS_URL", "MILLRACE_ENV", "SECRET_KEY", "DEBUG"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Output:
    """Collects a process's output on a thread so the pipe never fills."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream):
        for line in iter(stream.readline, ""):
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.text())
            if match:
                return match
            time.sleep(0.2)
        raise AssertionError(f"{pattern!r} not seen within {timeout}s:\n{self.text()[-4000:]}")


def _enqueue_a_task(env: dict[str, str]) -> None:
    """Enqueue Celery's audit pruning from another process, as beat or the web tier does."""
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from control_plane.audit.tasks import prune_audit_events; prune_audit_events.delay()",
        ],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )


@pytest.mark.slow
def test_up_serves_console_runs_worker_and_stops_cleanly(tmp_path):
    port, broker_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in EMBEDDED_ENV_DROP}
    env.update(MILLRACE_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--port", str(port), "--broker-port", str(broker_port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = Output(proc.stdout)
    try:
        out.wait_for(r"Millrace is up", timeout=90)
        password = out.wait_for(r"Username: admin\s+Password: (\S+)", timeout=5).group(1)
        assert "Tenant 'default' created" in out.text()
        # The banner comes last: after every process said it is ready, not among them.
        text = out.text()
        banner = text.index("Millrace is up")
        for ready in ("broker 1 ready on", " ready.", "beat: Starting"):
            assert -1 < text.find(ready) < banner, (ready, text[-3000:])
        assert f"Development listener: 127.0.0.1:{broker_port}" in text[banner:]
        assert "No hostname was supplied" not in text  # kombu, about the embedded queue's URL
        assert "-------------- [queues]" not in text  # Celery's start-up banner

        base = f"http://127.0.0.1:{port}"
        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        page = browser.open(f"{base}/login/", timeout=10).read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode(
            {"username": "admin", "password": password, "csrfmiddlewaretoken": csrf}
        ).encode()
        request = urllib.request.Request(f"{base}/login/", data=form, headers={"Referer": base})
        response = browser.open(request, timeout=10)
        assert response.url.endswith("/t/default/")
        assert "No topics yet" in response.read().decode()

        # A task enqueued by another process reaches the worker through the data dir.
        _enqueue_a_task(env)
        out.wait_for(r"millrace\.audit\.prune_audit_events\[[^\]]+\] succeeded", timeout=30)

        # The broker serves the default tenant to an unauthenticated Kafka client.
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        bootstrap = f"127.0.0.1:{broker_port}"
        out.wait_for(r"broker 1 ready", timeout=60)
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        producer.send("newcomer", b"hello from make run").get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, consumer_timeout_ms=5000, auto_offset_reset="earliest"
        )
        consumer.assign([TopicPartition("newcomer", 0)])
        assert [m.value for m in consumer] == [b"hello from make run"]
        consumer.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, out.text()[-3000:]
    assert "Millrace stopped." in out.text()


@pytest.mark.slow
def test_second_up_does_not_print_the_password_again(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in EMBEDDED_ENV_DROP}
    env.update(MILLRACE_DATA_DIR=str(tmp_path / "data"))
    code = (
        "import django; django.setup();"
        "from control_plane.tenancy.bootstrap import ensure_first_admin as e;"
        "a = e(); b = e(); print(bool(a.password), b.password, a.tenant_created, b.tenant_created)"
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "DJANGO_SETTINGS_MODULE": "control_plane.settings"},
    )
    assert result.stdout.split() == ["True", "None", "True", "False"], result.stderr


def _children_of(pid: int) -> dict[str, int]:
    """{role: pid} of `up`'s children, read from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid != pid:
            continue
        words = [a.decode() for a in argv]
        for role in ("worker", "beat", "broker", "daphne"):
            if role in words[1:8]:
                found["web" if role == "daphne" else role] = int(entry.name)
    return found


def _start_up(tmp_path, port, broker_port, *args):
    env = {k: v for k, v in os.environ.items() if k not in EMBEDDED_ENV_DROP}
    env.update(MILLRACE_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "up",
            "--port",
            str(port),
            "--broker-port",
            str(broker_port),
            *args,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, env, Output(proc.stdout)


def _stop_up(proc, out):
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert code == 0, out.text()[-3000:]
    assert "Millrace stopped." in out.text()


@pytest.mark.slow
def test_a_child_that_dies_is_restarted_and_the_rest_keep_running(tmp_path):
    proc, env, out = _start_up(tmp_path, free_port(), free_port())
    try:
        out.wait_for(r"Millrace is up", timeout=90)
        out.wait_for(r"broker 1 ready", timeout=60)
        children = {}
        deadline = time.monotonic() + 30
        while len(children) < 4 and time.monotonic() < deadline:
            children = _children_of(proc.pid)
            time.sleep(0.2)
        assert set(children) == {"web", "worker", "beat", "broker"}, children
        os.kill(children["worker"], signal.SIGKILL)
        out.wait_for(r"worker exited with code -9; restarting it in 1 s \(restart 1\)", 30)
        out.wait_for(r"worker restarted \(pid \d+\)", 30)
        # The others were left alone, and the new worker takes tasks.
        after = _children_of(proc.pid)
        assert after["web"] == children["web"] and after["broker"] == children["broker"]
        assert after["worker"] != children["worker"]
        _enqueue_a_task(env)
        out.wait_for(r"millrace\.audit\.prune_audit_events\[[^\]]+\] succeeded", timeout=60)
        assert proc.poll() is None
        # Beat has sent the controller tick every second all along: Celery's lines about it
        # are DEBUG, so the output stays readable (the audit task's lines above are kept).
        assert not re.search(r"Task millrace\.controller\.tick\[", out.text())
        assert "Sending due task controller-tick" not in out.text()
    finally:
        _stop_up(proc, out)


@pytest.mark.slow
def test_the_development_listener_can_be_turned_off(tmp_path):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    broker_port = free_port()
    proc, _env, out = _start_up(tmp_path, free_port(), broker_port, "--no-dev-listener")
    try:
        out.wait_for(r"Press Ctrl-C to stop", timeout=90)
        assert "Development listener" not in out.text()
        assert f"Kafka: 127.0.0.1:{broker_port}  SASL_PLAINTEXT with an API key" in out.text()
        anonymous = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker_port}"})
        with pytest.raises(KafkaException):
            anonymous.list_topics(timeout=5)
    finally:
        _stop_up(proc, out)


def test_up_refuses_a_port_another_program_holds(tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in EMBEDDED_ENV_DROP}
        env.update(MILLRACE_DATA_DIR=str(tmp_path / "data"))
        result = subprocess.run(
            [sys.executable, "manage.py", "up", "--port", str(taken), "--no-migrate"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert f"127.0.0.1:{taken} is already in use" in result.stderr
    assert "Millrace is up" not in result.stdout
