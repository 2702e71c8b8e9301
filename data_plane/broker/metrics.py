"""A broker's Prometheus metrics, and the small HTTP endpoint that serves them.

Each broker process serves ``/metrics`` (Prometheus text format), ``/healthz`` (the event
loop answers) and ``/readyz`` (registered, metadata loaded, not shutting down) on its
metrics port, which is for the operator's network only: it carries tenant and topic
names (never credentials) and takes no authentication, like Kafka's JMX exporter.

Names follow Prometheus conventions (``_total`` counters, base units). Traffic counters
carry ``tenant`` (the slug) and ``topic`` labels; replication traffic is counted apart,
like Kafka's ``ReplicationBytesInPerSec``, so ``bytes_out`` is what consumers read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from data_plane.protocol.errors import ErrorCode

logger = logging.getLogger("millrace.broker.metrics")

# Request latencies: from 0.5 ms (an in-memory answer) to 30 s (long fetch waits).
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class BrokerMetrics:
    """The metrics of one broker. A registry per instance, so tests can run several
    brokers in one process without their counters mixing."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        topic = ["tenant", "topic"]
        self.bytes_in = Counter(
            "millrace_broker_bytes_in",
            "Record bytes appended by producers (after decompression checks, as stored)",
            topic,
            registry=r,
        )
        self.records_in = Counter(
            "millrace_broker_records_in", "Records appended by producers", topic, registry=r
        )
        self.bytes_out = Counter(
            "millrace_broker_bytes_out", "Record bytes sent to consumers", topic, registry=r
        )
        self.records_out = Counter(
            "millrace_broker_records_out",
            "Records sent to consumers (the offsets the sent batches span)",
            topic,
            registry=r,
        )
        self.replication_bytes_in = Counter(
            "millrace_broker_replication_bytes_in",
            "Record bytes this broker appended as a follower",
            registry=r,
        )
        self.replication_bytes_out = Counter(
            "millrace_broker_replication_bytes_out",
            "Record bytes sent to follower brokers",
            registry=r,
        )
        self.requests = Counter(
            "millrace_broker_requests", "Requests handled, by API", ["api"], registry=r
        )
        self.request_errors = Counter(
            "millrace_broker_request_errors",
            "Error codes in responses (per partition or resource where the API has them)",
            ["api", "error"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "millrace_broker_request_duration_seconds",
            "Time from a request's arrival to its response being queued, by API",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.unserved_requests = Counter(
            "millrace_broker_unserved_requests",
            "Requests at an API version this broker does not serve (answered "
            "UNSUPPORTED_VERSION): clients that must upgrade",
            ["api", "version"],
            registry=r,
        )
        self.format_conversions = Counter(
            "millrace_broker_format_conversions",
            "Message sets converted between formats v0/v1 and RecordBatch v2 for old "
            "clients: up (Produce v0-2), down (Fetch v0-3)",
            ["direction"],
            registry=r,
        )
        self.isr_shrinks = Counter(
            "millrace_broker_isr_shrinks",
            "ISR shrinks this broker proposed as leader",
            registry=r,
        )
        self.isr_expands = Counter(
            "millrace_broker_isr_expands",
            "ISR expansions this broker proposed as leader",
            registry=r,
        )
        self.connections_created = Counter(
            "millrace_broker_connections_created",
            "Connections accepted, by listener",
            ["listener"],
            registry=r,
        )
        self.connections_refused = Counter(
            "millrace_broker_connections_refused",
            "Connections closed at once: max.connections.per.ip reached",
            registry=r,
        )
        self.authentication_failures = Counter(
            "millrace_broker_authentication_failures",
            "SASL authentications that failed",
            ["mechanism"],
            registry=r,
        )
        self.throttle_seconds = Counter(
            "millrace_broker_throttle_seconds",
            "Throttle time given to clients by the byte-rate quotas",
            ["tenant", "direction"],
            registry=r,
        )
        self.throttled_responses = Counter(
            "millrace_broker_throttled_responses",
            "Responses that carried a throttle time",
            ["tenant", "direction"],
            registry=r,
        )
        self.controlled_shutdowns = Counter(
            "millrace_broker_controlled_shutdowns",
            "Controlled shutdowns, by outcome",
            ["outcome"],
            registry=r,
        )
        self.info = Gauge(
            "millrace_broker_info", "This broker (always 1)", ["broker_id"], registry=r
        )

        # Label children by key: .labels() costs a lock and a dict lookup per call.
        self._per_api: dict[str, tuple[Any, Any]] = {}
        self._per_topic: dict[tuple[str, str], tuple[Any, Any, Any, Any]] = {}

    def request_done(self, api: str, started: float, body: Mapping[str, Any] | None) -> None:
        """Count a handled request, its latency, and the error codes in its response."""
        children = self._per_api.get(api)
        if children is None:
            children = (self.requests.labels(api), self.request_seconds.labels(api))
            self._per_api[api] = children
        children[0].inc()
        children[1].observe(time.perf_counter() - started)
        if body is not None:
            for code in _error_codes(body):
                self.request_errors.labels(api, _error_name(code)).inc()

    def _topic(self, tenant: str, topic: str) -> tuple[Any, Any, Any, Any]:
        children = self._per_topic.get((tenant, topic))
        if children is None:
            children = (
                self.bytes_in.labels(tenant, topic),
                self.records_in.labels(tenant, topic),
                self.bytes_out.labels(tenant, topic),
                self.records_out.labels(tenant, topic),
            )
            self._per_topic[(tenant, topic)] = children
        return children

    def produced(self, tenant: str, topic: str, nbytes: int, records: int) -> None:
        children = self._topic(tenant, topic)
        children[0].inc(nbytes)
        children[1].inc(records)

    def consumed(self, tenant: str, topic: str, nbytes: int, records: int) -> None:
        children = self._topic(tenant, topic)
        children[2].inc(nbytes)
        children[3].inc(records)

    def throttled(self, tenant: str, direction: str, throttle_ms: int) -> None:
        self.throttle_seconds.labels(tenant, direction).inc(throttle_ms / 1000)
        self.throttled_responses.labels(tenant, direction).inc()

    def watch(self, state: Callable[[], BrokerState]) -> None:
        """Gauges read from the broker when scraped."""
        self.registry.register(_StateCollector(state))


def _error_codes(body: Any) -> Iterator[int]:
    """Every non-zero ``error_code`` in a response body (top level, per topic, per
    partition...); record data is never walked (only dicts and lists are)."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "error_code":
                if value:
                    yield value
            elif isinstance(value, (dict, list)):
                yield from _error_codes(value)
    elif isinstance(body, list):
        for item in body:
            if isinstance(item, (dict, list)):
                yield from _error_codes(item)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class BrokerState:
    """What the gauges report, gathered by the broker when asked (server.py)."""

    def __init__(
        self,
        *,
        connections: int,
        partitions: int,
        leader_partitions: int,
        under_replicated: int,
        under_min_isr: int,
        log_sizes: Iterable[tuple[str, str, int]],
    ) -> None:
        self.connections = connections
        self.partitions = partitions
        self.leader_partitions = leader_partitions
        self.under_replicated = under_replicated
        self.under_min_isr = under_min_isr
        self.log_sizes = list(log_sizes)


class _StateCollector(Collector):
    def __init__(self, state: Callable[[], BrokerState]) -> None:
        self._state = state

    def describe(self) -> list[Any]:
        return []  # collected lazily; the gauges' names are fixed below

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            s = self._state()
        except Exception:  # a scrape must not take the broker down
            logger.warning("collecting broker gauges failed", exc_info=True)
            return
        yield GaugeMetricFamily(
            "millrace_broker_connections", "Open client and broker connections", s.connections
        )
        yield GaugeMetricFamily(
            "millrace_broker_partitions", "Partition replicas hosted here", s.partitions
        )
        yield GaugeMetricFamily(
            "millrace_broker_leader_partitions", "Partitions this broker leads", s.leader_partitions
        )
        yield GaugeMetricFamily(
            "millrace_broker_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set",
            s.under_replicated,
        )
        yield GaugeMetricFamily(
            "millrace_broker_under_min_isr_partitions",
            "Partitions led here whose ISR is below min.insync.replicas (acks=all fails)",
            s.under_min_isr,
        )
        sizes = GaugeMetricFamily(
            "millrace_broker_log_size_bytes",
            "Bytes on disk of the partition logs hosted here, per topic",
            labels=["tenant", "topic"],
        )
        for tenant, topic, size in s.log_sizes:
            sizes.add_metric([tenant, topic], size)
        yield sizes


class HealthServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on a thread of their own.

    ``live()`` and ``ready()`` are called from that thread and must only read state.
    """

    def __init__(
        self,
        metrics: BrokerMetrics,
        host: str,
        port: int,
        *,
        live: Callable[[], bool],
        ready: Callable[[], tuple[bool, str]],
    ) -> None:
        registry = metrics.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = live()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"event loop stuck\n")
                elif path == "/readyz":
                    ok, why = ready()
                    self._send(200 if ok else 503, (why + "\n").encode())
                else:
                    self._send(404, b"not found: /metrics, /healthz or /readyz\n")

            def _send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # scrapes every few seconds would drown the log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
