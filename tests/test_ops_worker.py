"""The Celery worker's task metrics: a real prefork worker, tasks over Redis, a scrape."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import structlog
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from control_plane import celery_metrics
from control_plane.audit.tasks import prune_audit_events
from control_plane.celery import app

ROOT = Path(__file__).resolve().parent.parent
TASK = "millrace.audit.prune_audit_events"  # deletes nothing from an empty audit log


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _database_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _stop(worker: subprocess.Popen[Any]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)  # its own session: the pool children too
            worker.wait(timeout=10)


@pytest.mark.slow
def test_prefork_worker_serves_task_metrics(django_db_setup, tmp_path):
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("needs DATABASE_URL (Postgres) and REDIS_URL: the worker is another process")
    port = _free_port()
    environ = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    environ.update(
        DATABASE_URL=_database_url(),  # the test database, migrated and empty
        MILLRACE_WORKER_METRICS_PORT=str(port),
        MILLRACE_WORKER_METRICS_HOST="127.0.0.1",
        MILLRACE_DATA_DIR=str(tmp_path / "data"),
    )
    app.control.purge()
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "control_plane",
            "worker",
            "-Q",
            settings.CELERY_TASK_DEFAULT_QUEUE,
            "-c",
            "2",
            "--pool",
            "prefork",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "--hostname",
            f"ops-test-{os.getpid()}@%h",
        ],
        cwd=ROOT,
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        for _ in range(3):
            app.send_task(TASK, queue=settings.CELERY_TASK_DEFAULT_QUEUE)
        # Wrong arguments: the task raises TypeError in the worker.
        app.send_task(TASK, args=[1], queue=settings.CELERY_TASK_DEFAULT_QUEUE)
        succeeded = ("millrace_celery_tasks_total", (("state", "succeeded"), ("task", TASK)))
        failed = ("millrace_celery_tasks_total", (("state", "failed"), ("task", TASK)))
        runs = ("millrace_celery_task_duration_seconds_count", (("task", TASK),))
        deadline = time.monotonic() + 60
        samples: dict[Any, float] = {}
        while time.monotonic() < deadline:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            try:
                samples = _scrape(port)
            except (urllib.error.URLError, ConnectionError):
                samples = {}
            if samples.get(succeeded) == 3 and samples.get(failed) == 1 and samples.get(runs) == 4:
                break
            time.sleep(0.25)
        else:
            pytest.fail(
                f"worker metrics did not reach 3 succeeded, 1 failed, 4 runs: "
                f"{ {k: v for k, v in samples.items() if 'celery' in k[0]} }\n"
                + (tmp_path / "worker.log").read_text()[-3000:]
            )
        # Counted in the pool's children (prefork), served by the main process.
        assert (
            samples[
                ("millrace_celery_task_duration_seconds_bucket", (("le", "+Inf"), ("task", TASK)))
            ]
            == 4
        )
    finally:
        _stop(worker)
        log.close()
    output = (tmp_path / "worker.log").read_text()
    # Celery logs through settings.LOGGING (plain in development) with the task's context.
    assert f"task={TASK}" in output and "task_id=" in output, output[-3000:]


@pytest.mark.django_db
def test_tasks_outside_a_worker_count_nothing_and_keep_the_context():
    """Web, beat and eager runs: no multiprocess directory, no metrics, context intact."""
    assert not celery_metrics.state.enabled
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    # Start from an empty context: an earlier test's test-client request in this process may
    # have left its own (a server clears it before each request).
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id="r-77")
    try:
        prune_audit_events.apply()
        assert structlog.contextvars.get_contextvars() == {"request_id": "r-77"}
    finally:
        structlog.contextvars.clear_contextvars()
    assert celery_metrics.state.metrics is None


def test_a_busy_metrics_port_is_one_warning_and_the_worker_carries_on(settings, caplog):
    import logging
    import socket

    from control_plane import celery_metrics

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        settings.MILLRACE_WORKER_METRICS_HOST = "127.0.0.1"
        settings.MILLRACE_WORKER_METRICS_PORT = taken.getsockname()[1]
        with caplog.at_level(logging.INFO, logger=celery_metrics.logger.name):
            celery_metrics._on_worker_init()  # must not raise: tasks matter more
    [line] = [r for r in caplog.records if "worker metrics" in r.getMessage()]
    assert line.levelno == logging.WARNING and line.exc_info is None
    assert "MILLRACE_WORKER_METRICS_PORT" in line.getMessage()
