"""A Connect worker's Prometheus metrics, per connector and task, and their endpoint.

A worker whose config sets ``metrics.port`` serves them at ``/metrics`` on
``metrics.host`` (127.0.0.1 by default), for the operator's network: they carry connector
and topic names, never configs or credentials. The counters follow Kafka Connect's task
metrics (``source-record-poll-total``, ``sink-record-read-total``, ...) with Prometheus's
names:

* ``millrace_connect_source_records_polled_total`` / ``..._written_total``: records a
  source task returned from ``poll``, and those the brokers acknowledged;
* ``millrace_connect_sink_records_read_total`` / ``..._put_total``: records a sink task
  read, and those handed to ``put``;
* ``millrace_connect_records_skipped_total``: records dropped by a tolerated failure
  (``errors.tolerance=all``), and ``millrace_connect_deadletterqueue_produce_total``
  those of them sent to the dead letter queue;
* ``millrace_connect_offset_commits_total{outcome}``: offset commits, ``ok`` or
  ``failed``;
* ``millrace_connect_task_state{state}``: 1 for each task's current state, 0 for the rest.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

logger = logging.getLogger(__name__)

STATES = ("UNASSIGNED", "RUNNING", "PAUSED", "FAILED")
LABELS = ("connector", "task")


class ConnectMetrics:
    """The metrics of one worker (a registry per instance, so tests can hold several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

        def counter(name: str, doc: str, *extra: str) -> Counter:
            return Counter(name, doc, [*LABELS, *extra], registry=self.registry)

        self.polled = counter("millrace_connect_source_records_polled",
                              "records source tasks returned from poll")  # fmt: skip
        self.written = counter("millrace_connect_source_records_written",
                               "source records the brokers acknowledged")  # fmt: skip
        self.read = counter("millrace_connect_sink_records_read", "records sink tasks read")
        self.put = counter("millrace_connect_sink_records_put", "records handed to put")
        self.skipped = counter("millrace_connect_records_skipped",
                               "records dropped by a tolerated failure")  # fmt: skip
        self.dead_lettered = counter("millrace_connect_deadletterqueue_produce",
                                     "records sent to the dead letter queue")  # fmt: skip
        self.commits = counter("millrace_connect_offset_commits", "offset commits", "outcome")
        self.state = Gauge("millrace_connect_task_state", "1 for the task's current state",
                           [*LABELS, "state"], registry=self.registry)  # fmt: skip
        self._lock = threading.Lock()

    def task_state(self, connector: str, task: int, state: str) -> None:
        with self._lock:
            for known in STATES:
                self.state.labels(connector, str(task), known).set(1 if known == state else 0)

    def forget(self, connector: str, task: int) -> None:
        """A task gone from this worker: its series go too."""
        labels = (connector, str(task))
        with self._lock:
            for metric in (self.polled, self.written, self.read, self.put, self.skipped,
                           self.dead_lettered):  # fmt: skip
                _remove(metric, labels)
            for outcome in ("ok", "failed"):
                _remove(self.commits, (*labels, outcome))
            for known in STATES:
                _remove(self.state, (*labels, known))

    def serve(self, host: str, port: int) -> Any:
        """Serve ``/metrics``; the server (its ``server_address`` has the port bound)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        logger.info("connect metrics on http://%s:%s/metrics", *server.server_address[:2])
        return server


def _remove(metric: Any, labels: tuple[str, ...]) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass  # never recorded


# The worker process's metrics (a worker is one process; tests pass their own).
WORKER_METRICS = ConnectMetrics()
