"""The Celery worker's metrics, served on ``MILLRACE_WORKER_METRICS_PORT`` (9809; 0 = off).

* ``millrace_celery_tasks_total{task,state}``: state ``succeeded``, ``failed``, ``retried``;
* ``millrace_celery_task_duration_seconds{task}``: a histogram of run times.

The prefork pool runs tasks in child processes, so this uses prometheus-client's
multiprocess mode: on ``worker_init`` (the main process, before the pool forks) the
worker points ``PROMETHEUS_MULTIPROC_DIR`` at an empty directory (the one given, its
``*.db`` files removed, or a fresh temporary one), children write their values there
(one file per pid), and an HTTP server thread in the main process serves what a
``MultiProcessCollector`` reads from all of them. The metrics themselves are created
lazily, in whichever process first counts something, after the directory is set.

Only a worker turns this on: web, beat and eagerly run tasks count nothing here.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from celery import signals

logger = logging.getLogger("millrace.worker.metrics")

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _State:
    enabled = False
    directory: Path | None = None
    owns_directory = False
    server: Any = None
    metrics: tuple[Any, Any] | None = None
    # task id -> perf_counter at task_prerun (per process).
    started: dict[str, float] = {}


state = _State()


def _metrics() -> tuple[Any, Any]:
    """The counter and histogram, created on first use in this process."""
    if state.metrics is None:
        from prometheus_client import Counter, Histogram

        # No registry: in multiprocess mode values live in files and the collector reads
        # those; registering here could only clash with another registration.
        tasks = Counter(
            "millrace_celery_tasks",
            "Celery tasks finished by this worker, by task and outcome.",
            ["task", "state"],
            registry=None,
        )
        duration = Histogram(
            "millrace_celery_task_duration_seconds",
            "Run time of Celery tasks (every outcome), by task.",
            ["task"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        state.metrics = (tasks, duration)
    return state.metrics


def _task_name(sender: Any) -> str:
    return str(getattr(sender, "name", None) or sender or "unknown")


def start(port: int, host: str) -> None:
    """Enter multiprocess mode and serve the metrics (main worker process, before forking)."""
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server, values

    configured = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if configured:
        directory = Path(configured)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):  # a previous run's values
            stale.unlink()
    else:
        directory = Path(tempfile.mkdtemp(prefix="millrace-worker-metrics-"))
        state.owns_directory = True
    state.directory = directory
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    # Serving first: when the port is taken nothing below has changed.
    state.server, _thread = start_http_server(port, addr=host, registry=registry)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    # prometheus-client chose its value class when first imported, before the directory
    # was set: choose again, so that metrics created from now on (in the pool's children,
    # forked later) write their values to files there.
    values.ValueClass = values.get_value_class()
    state.metrics = None
    state.enabled = True
    logger.info("worker metrics on http://%s:%s/metrics", host, port)


def stop() -> None:
    if state.server is not None:
        state.server.shutdown()
        state.server.server_close()
        state.server = None
    if state.owns_directory and state.directory is not None:
        shutil.rmtree(state.directory, ignore_errors=True)
    state.enabled = False


# --- signal receivers ------------------------------------------------------------------------


@signals.worker_init.connect
def _on_worker_init(sender: Any = None, **_: Any) -> None:
    from django.conf import settings

    port = settings.MILLRACE_WORKER_METRICS_PORT
    if not port:
        return
    try:
        start(port, settings.MILLRACE_WORKER_METRICS_HOST)
    except OSError as exc:
        # Tasks matter more than their metrics: run without them, in one clear line (a
        # port in use is an everyday event, e.g. a second `manage.py up`, not a crash).
        logger.warning(
            "cannot serve worker metrics on %s:%s (%s); the worker runs without them; set "
            "MILLRACE_WORKER_METRICS_PORT to another port, or 0 to turn them off",
            settings.MILLRACE_WORKER_METRICS_HOST,
            port,
            exc.strerror or exc,
        )
        stop()


@signals.worker_shutdown.connect
def _on_worker_shutdown(**_: Any) -> None:
    if state.enabled:
        stop()


@signals.worker_process_shutdown.connect
def _on_process_shutdown(pid: int | None = None, **_: Any) -> None:
    if state.enabled:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid(), path=str(state.directory))


@signals.task_prerun.connect
def _on_prerun(task_id: str | None = None, **_: Any) -> None:
    if state.enabled and task_id:
        state.started[task_id] = time.perf_counter()


@signals.task_postrun.connect
def _on_postrun(sender: Any = None, task_id: str | None = None, **_: Any) -> None:
    started = state.started.pop(task_id, None) if task_id else None
    if state.enabled and started is not None:
        _metrics()[1].labels(_task_name(sender)).observe(time.perf_counter() - started)


@signals.task_success.connect
def _on_success(sender: Any = None, **_: Any) -> None:
    if state.enabled:
        _metrics()[0].labels(_task_name(sender), "succeeded").inc()


@signals.task_failure.connect
def _on_failure(sender: Any = None, **_: Any) -> None:
    if state.enabled:
        _metrics()[0].labels(_task_name(sender), "failed").inc()


@signals.task_retry.connect
def _on_retry(sender: Any = None, **_: Any) -> None:
    if state.enabled:
        _metrics()[0].labels(_task_name(sender), "retried").inc()
