"""Replication benchmark: ``python -m bench.replication [--quick]``.

``make bench-replication`` runs it. It starts three brokers (ids 1-3, default settings) on
loopback, sharing one throwaway Postgres database named after this process and dropped at
the end. Postgres is needed because brokers learn metadata changes by LISTEN/NOTIFY and the
controller decides by compare-and-set there. The controller runs as Celery beat would run
it: a ``python -m bench.store controller`` process calling ``controller_tick()`` once a
second. Clients sign in with SCRAM-SHA-256 as a service account of the default tenant
(quotas raised) that may do anything. Nothing is pinned: the machine has too few cores to
give three brokers and the client a core each. Prints one JSON line per workload:

* ``produce_100b_acks_all_rf3``: 100-byte records, acks=all to a 1-partition topic with
  replication factor 3 and ``min.insync.replicas`` 2 (confluent-kafka, linger 5 ms, batch
  1 MiB). The baseline is measured in the same run on the same cluster: acks=1 to a
  replication factor 1 topic (one broker leads it, the others idle). Runs alternate; the
  line reports medians and ranges, the ratio, and broker CPU seconds per GB (all brokers).
* ``e2e_latency_1kib_acks_all_rf3``: 1 KiB records paced at 5,000/s, acks=all, linger 1 ms.
  A consumer in its own process reads them. Latency is its receive time minus the send
  time embedded in the record, measured from the intended (scheduled) send time so that
  a stalled producer is not hidden. Also reported from the ``produce()`` call, and the
  producer's acknowledgement latency; the median for each second of the run shows whether
  a queue builds up. ``with_linger_5ms`` repeats the run with perf.py's batching.
* ``leader_kill9_failover`` (broker lease as configured, 3 s by default) and, with
  ``--short-lease N``, ``leader_kill9_failover_lease_<N>s`` (a fresh cluster with that lease).
  A producer sends 100-byte records continuously (acks=all, default retries). The
  partition leader is SIGKILLed. Each run measures the seconds from the kill until the
  first acknowledgement of a record sent after it, that is, until producing resumed on the
  new leader. The controller's log shows when the broker was fenced and a leader elected.
  The killed broker is restarted (same id, port and data directory). The next kill waits
  until it is back in the ISR. At the end every partition is read back: ``lost`` counts
  acknowledged records that are missing.

Every wait is bounded by ``--timeout``; every process is stopped on the way out. ``--keep``
keeps the brokers' and the controller's logs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import re
import secrets
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import (
    ROOT,
    bench_env,
    emit,
    free_port,
    metadata_database,
    prepare_store,
    run_step,
    start_broker,
    stop_process,
)

BROKER_IDS = (1, 2, 3)
PRODUCE_RECORDS = 2_000_000
LATENCY_RATE = 5_000  # records per second
LATENCY_BYTES = 1024
LATENCY_LINGER_MS = 1
FAILOVER_RATE = 1_000  # records per second, while the leaders are killed
FAILOVER_BYTES = 100
FAILOVER_TARGET_S = 5.0
CHILD_LIFETIME_S = 600  # a consumer process never outlives this, whatever the parent does
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
FENCED = re.compile(r"fenced brokers \[([\d, ]*)\]")
# What the comparison run at linger 5 ms adds to the latency line.
BATCHED_FIELDS = (
    "linger_ms",
    "acked",
    "errors",
    "received",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "p50_ms_each_second",
)


# --- the cluster ---------------------------------------------------------------------------


class Cluster:
    """Three brokers and the controller on one metadata database.

    Broker ``n`` keeps its port, data directory and log (``broker-n.log``, appended to on
    every start) for the life of the bench; the controller logs to ``controller.log``.
    """

    def __init__(
        self, work: Path, env: dict[str, str], ports: dict[int, int], key: dict[str, str]
    ) -> None:
        self.work = work
        self.env = env
        self.ports = ports
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports.values())
        self.endpoint = perf.Endpoint(bootstrap, key["username"], key["password"])
        # A client that still knows a deleted topic would create it again (librdkafka
        # producers and admin clients ask for auto-creation by default).
        self.conf = self.endpoint.confluent() | {"allow.auto.create.topics": False}
        self.brokers: dict[int, subprocess.Popen[bytes]] = {}
        self.controller: subprocess.Popen[bytes] | None = None
        self.controller_log = work / "controller.log"

    def log_path(self, broker_id: int) -> Path:
        return self.work / f"broker-{broker_id}.log"

    def start(self, broker_id: int) -> None:
        self.brokers[broker_id] = start_broker(
            self.env,
            port=self.ports[broker_id],
            data_dir=self.work / f"broker-{broker_id}",
            log_path=self.log_path(broker_id),
            broker_id=broker_id,
            # SASL only: on the development listener every connection is anonymous from
            # the start and SaslHandshake is refused, so followers could not sign in.
            anonymous=False,
        )

    def kill(self, broker_id: int) -> None:
        process = self.brokers[broker_id]
        process.kill()
        process.wait(10)

    def start_controller(self, lifetime_s: float) -> None:
        # As the Celery beat entry "controller-tick" runs it: once a second.
        step = ["-m", "bench.store", "controller", "--lifetime", str(int(lifetime_s))]
        with open(self.controller_log, "ab") as log:
            self.controller = subprocess.Popen(  # noqa: S603 - our own command line
                [sys.executable, *step],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.controller is not None:
            stop_process(self.controller, grace=10)
        for process in self.brokers.values():
            stop_process(process)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the running brokers so far."""
        total = 0
        for process in self.brokers.values():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def cluster(
    work: Path, env: dict[str, str], ports: dict[int, int], key: dict[str, str]
) -> Iterator[Cluster]:
    nodes = Cluster(work, env, ports, key)
    try:
        for broker_id in BROKER_IDS:
            nodes.start(broker_id)
        nodes.start_controller(lifetime_s=4 * 3600)
        yield nodes
    finally:
        nodes.stop()


def _controller_events(log: Path, since: int, victim: int) -> tuple[float | None, float | None]:
    """Wall-clock times the controller logged fencing ``victim`` and electing past it."""
    fenced = elected = None
    text = log.read_bytes()[since:].decode(errors="replace")
    for line in text.splitlines():
        stamp = LOG_TIME.match(line)
        if stamp is None:
            continue
        at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        ids = FENCED.search(line)
        if fenced is None and ids and str(victim) in ids.group(1).replace(" ", "").split(","):
            fenced = at
        if elected is None and f": leader {victim} -> " in line:
            elected = at
    return fenced, elected


# --- metadata as a client sees it ------------------------------------------------------------


def _partition(admin: Any, topic: str) -> tuple[int, list[int], list[int]] | None:
    """(leader, replicas, isr) of partition 0 from a broker's Metadata answer."""
    from confluent_kafka import KafkaException

    try:
        found = admin.list_topics(topic, timeout=5).topics.get(topic)
    except KafkaException:
        return None
    if found is None or found.error is not None or 0 not in found.partitions:
        return None
    p = found.partitions[0]
    return int(p.leader), list(p.replicas), list(p.isrs)


def leader_of(admin: Any, topic: str, timeout: float) -> int:
    """The leader some broker names (one that just learnt of the topic may not know it yet)."""
    deadline = time.monotonic() + timeout
    while (state := _partition(admin, topic)) is None or state[0] < 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for a leader of {topic}")
        time.sleep(0.05)
    return state[0]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``check()`` held (polled every 50 ms); TimeoutError after ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def in_sync(admin: Any, topic: str, replicas: int) -> bool:
    state = _partition(admin, topic)
    return state is not None and state[0] >= 0 and len(state[2]) == replicas == len(state[1])


def create_topic(admin: Any, rf: int, timeout: float, min_isr: int | None = None) -> str:
    """A new 1-partition topic; returns once a leader serves it with every replica in sync."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    name = f"bench-rep-rf{rf}-{uuid.uuid4().hex[:8]}"
    config = {"min.insync.replicas": str(min_isr)} if min_isr else {}
    perf.create_topics(admin, [NewTopic(name, 1, rf, config=config)])
    wait_until(lambda: in_sync(admin, name, rf), timeout, f"{name} to be in sync")
    return name


def delete_topic(admin: Any, name: str) -> None:
    """Delete a finished workload's topic (a failure is only reported: the bench goes on)."""
    from confluent_kafka import KafkaException

    try:
        admin.delete_topics([name])[name].result(30)
    except KafkaException as exc:
        print(f"deleting {name}: {exc}", file=sys.stderr)


def _series(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "p90": None, "max": None}
    p90 = statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else None
    return {
        "median": round(statistics.median(values), 3),
        "p90": round(values[0] if p90 is None else p90, 3),
        "max": round(max(values), 3),
    }


# --- 1. throughput ------------------------------------------------------------------------


def produce_throughput(
    nodes: Cluster, admin: Any, records: int, repeats: int, timeout: float
) -> dict[str, Any]:
    """acks=all to RF 3 against acks=1 to RF 1, alternating, ``repeats`` times each."""
    endpoint = nodes.endpoint
    runs: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
    for _ in range(repeats):
        for rf, acks in ((1, "1"), (3, "all")):
            topic = create_topic(admin, rf, timeout, min_isr=2 if rf == 3 else None)
            leader = leader_of(admin, topic, timeout)
            os.sync()  # earlier runs' dirty pages must not throttle this one's writes
            cpu = nodes.cpu_seconds()
            result = perf.produce(
                endpoint, topic, records=records, size=100, acks=acks, timeout=max(600, timeout)
            )
            result["broker_cpu_s"] = nodes.cpu_seconds() - cpu
            result["leader"] = leader
            runs[rf].append(result)
            delete_topic(admin, topic)

    def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
        rates = [r["records_per_s"] for r in results]
        middle = sorted(results, key=lambda r: r["records_per_s"])[len(results) // 2]
        gigabytes = records * 100 / 1e9
        return {
            "records_per_s": round(statistics.median(rates)),
            "records_per_s_range": [min(rates), max(rates)],
            "mb_per_s": round(statistics.median(rates) * 100 / 2**20, 1),
            "p50_ms": middle.get("p50_ms"),
            "p99_ms": middle.get("p99_ms"),
            "errors": sum(r["errors"] for r in results),
            "undelivered": sum(r["undelivered"] for r in results),
            "broker_cpu_s_per_gb": round(
                statistics.median(r["broker_cpu_s"] for r in results) / gigabytes, 1
            ),
            "leaders": [r["leader"] for r in results],
        }

    replicated, single = summary(runs[3]), summary(runs[1])
    return replicated | {
        "baseline_acks1_rf1": single,
        "ratio": round(replicated["records_per_s"] / single["records_per_s"], 3),
    }


# --- 2. end-to-end latency ------------------------------------------------------------------


def _latency_consumer(conf: dict[str, Any], topic: str, conn: Connection) -> None:
    """Child process: read ``topic`` from offset 0, note each record's latencies (ms).

    Records sent at time 0 are warm-up: the first one is answered with "ready". Stops once
    it holds as many records as the parent's ("expect", n) says, or 10 s after that.
    Answers with three arrays of doubles: intended send times, and latencies from them and
    from the ``produce()`` calls.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(conf)
    intended_at, from_intended, from_send = array("d"), array("d"), array("d")
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        ready, expected, stop_at = False, -1, float("inf")
        deadline = time.monotonic() + CHILD_LIFETIME_S
        while time.monotonic() < min(deadline, stop_at) and (
            expected < 0 or len(from_send) < expected
        ):
            if conn.poll():
                expected, stop_at = conn.recv()[1], time.monotonic() + 10
            # consume(n, timeout) waits for n records or the timeout, whichever is first,
            # which would add up to the timeout to every latency: wait for one record,
            # then take whatever else has arrived.
            first = consumer.poll(0.05)
            batch = [] if first is None else [first, *consumer.consume(1000, 0)]
            now = time.time()
            for msg in batch:
                value = msg.value()
                if msg.error() is not None or not isinstance(value, bytes):
                    continue
                intended, sent = struct.unpack_from(">dd", value)
                if intended == 0:
                    if not ready:
                        conn.send("ready")
                        ready = True
                    continue
                intended_at.append(intended)
                from_intended.append((now - intended) * 1000)
                from_send.append((now - sent) * 1000)
        conn.send(tuple(a.tobytes() for a in (intended_at, from_intended, from_send)))
    finally:
        consumer.close()
        conn.close()


def _percentiles(latencies: list[float] | array[float]) -> dict[str, Any]:
    found = perf._percentiles(list(latencies))
    return {k: round(v, 2) for k, v in found.items()}


def _per_second(intended_at: array[float], latencies: array[float]) -> list[float]:
    """The median latency of the records due in each second of the run: growth is queueing."""
    seconds: dict[int, list[float]] = {}
    first = min(intended_at, default=0.0)
    for at, latency in zip(intended_at, latencies, strict=True):
        seconds.setdefault(int(at - first), []).append(latency)
    return [round(statistics.median(seconds[s]), 1) for s in sorted(seconds)]


def e2e_latency(
    nodes: Cluster, admin: Any, seconds: float, linger_ms: int, timeout: float
) -> dict[str, Any]:
    """LATENCY_RATE paced 1 KiB records, acks=all, to a consumer in another process."""
    from confluent_kafka import Producer

    topic = create_topic(admin, 3, timeout, min_isr=2)
    conf = nodes.conf
    consumer_conf = conf | {"group.id": f"bench-{topic}", "enable.auto.commit": False}
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    child = mp.Process(target=_latency_consumer, args=(consumer_conf, topic, theirs), daemon=True)
    child.start()
    theirs.close()
    producer = Producer(conf | {"acks": "all", "linger.ms": linger_ms})
    acked: list[float] = []
    errors = [0]

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
        else:
            acked.append((time.time() - struct.unpack_from(">dd", msg.value())[1]) * 1000)

    try:
        warm = struct.pack(">dd", 0, 0).ljust(LATENCY_BYTES, b"\0")
        deadline = time.monotonic() + timeout
        while not ours.poll(0.5):  # until the consumer reads what is produced
            if time.monotonic() > deadline or not child.is_alive():
                raise TimeoutError("the latency consumer never read the warm-up records")
            producer.produce(topic, warm)
            producer.poll(0)
        ours.recv()
        producer.flush(timeout)
        sent, elapsed = _paced(producer, topic, seconds, delivered)
        producer.flush(timeout)
        ours.send(("expect", len(acked)))
        if not ours.poll(timeout + 10):
            raise TimeoutError("the latency consumer did not report")
        intended_at, from_intended, from_send = array("d"), array("d"), array("d")
        for values, raw in zip((intended_at, from_intended, from_send), ours.recv(), strict=True):
            values.frombytes(raw)
    finally:
        child.join(15)
        if child.is_alive():
            child.kill()
            child.join(5)
        ours.close()
    delete_topic(admin, topic)
    return {
        "linger_ms": linger_ms,
        "achieved_per_s": round(sent / elapsed),
        "sent": sent,
        "acked": len(acked),
        "errors": errors[0],
        "received": len(from_send),
        **_percentiles(from_intended),
        "p50_ms_each_second": _per_second(intended_at, from_intended),
        "from_produce_call": _percentiles(from_send),
        "produce_ack": _percentiles(acked),
    }


def _paced(
    producer: Any, topic: str, seconds: float, delivered: Callable[[Any, Any], None]
) -> tuple[int, float]:
    """Send LATENCY_RATE records a second for ``seconds``, each stamped (intended, sent)."""
    interval = 1 / LATENCY_RATE
    total = int(LATENCY_RATE * seconds)
    padding = b"\0" * (LATENCY_BYTES - 16)
    wall, start = time.time(), time.perf_counter()
    sent = 0
    while sent < total and time.perf_counter() - start < 2 * seconds + 10:
        elapsed = time.perf_counter() - start
        while sent < total and sent * interval <= elapsed:
            value = struct.pack(">dd", wall + sent * interval, time.time()) + padding
            try:
                producer.produce(topic, value, on_delivery=delivered)
            except BufferError:
                break  # the queue is full: serve callbacks, then go on where we were
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, sent * interval - (time.perf_counter() - start)))
    return sent, time.perf_counter() - start


# --- 3. failover ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One failover series: a client library and the settings it runs with."""

    label: str
    client: str  # "confluent-kafka", "kafka-python" or "aiokafka"
    settings: dict[str, Any] = field(default_factory=dict)


# Each library at its defaults; kafka-python also as an ordering-conscious user runs it
# (one request in flight), and with the settings docs/reliability.md recommends.
KAFKA_PYTHON_TUNED = {
    "max_in_flight_requests_per_connection": 1,
    "request_timeout_ms": 5_000,
    "reconnect_backoff_max_ms": 500,
    "metadata_max_age_ms": 5_000,
}
VARIANTS = (
    Variant("confluent-kafka", "confluent-kafka"),
    Variant("kafka-python", "kafka-python"),
    Variant(
        "kafka-python, max_in_flight_requests_per_connection=1",
        "kafka-python",
        {"max_in_flight_requests_per_connection": 1},
    ),
    Variant("kafka-python, recommended settings", "kafka-python", KAFKA_PYTHON_TUNED),
    Variant("aiokafka", "aiokafka"),
)
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")


class ContinuousProducer(threading.Thread):
    """Sends FAILOVER_RATE numbered records a second until stopped; notes what is acked.

    After ``mark()``, ``resumed_at`` becomes the wall-clock time of the first
    acknowledgement of a record sent after the mark. The client library is the
    ``variant``'s; its callbacks run on this thread or the library's own, and only add to
    sets and lists (atomic under the GIL).
    """

    def __init__(
        self, endpoint: perf.Endpoint, topic: str, lifetime: float, variant: Variant
    ) -> None:
        super().__init__(name="failover-producer", daemon=True)
        self.endpoint, self.topic, self.lifetime = endpoint, topic, lifetime
        self.variant = variant
        self.sent_at: list[float] = []
        self.acked: set[int] = set()
        self.errors: list[str] = []
        self.undelivered = 0
        self.marker = float("inf")
        self.resumed_at: float | None = None
        self._halt = threading.Event()
        self._padding = b"\0" * (FAILOVER_BYTES - 8)

    def mark(self) -> None:
        self.resumed_at = None
        self.marker = time.time()

    def stop(self) -> None:
        self._halt.set()

    def acked_beyond(self, count: int) -> Callable[[], bool]:
        return lambda: len(self.acked) > count

    def _acked(self, seq: int) -> None:
        self.acked.add(seq)
        if self.resumed_at is None and self.sent_at[seq] >= self.marker:
            self.resumed_at = time.time()

    def _next(self) -> tuple[int, bytes]:
        seq = len(self.sent_at)
        self.sent_at.append(time.time())
        return seq, struct.pack(">Q", seq) + self._padding

    def _running(self, end: float) -> bool:
        return not self._halt.is_set() and time.monotonic() < end

    def run(self) -> None:
        end = time.monotonic() + self.lifetime
        if self.variant.client == "confluent-kafka":
            self._run_confluent(end)
        elif self.variant.client == "kafka-python":
            self._run_kafka_python(end)
        else:
            asyncio.run(self._run_aiokafka(end))

    def _run_confluent(self, end: float) -> None:
        from confluent_kafka import Producer

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self._acked(struct.unpack_from(">Q", msg.value())[0])

        conf = self.endpoint.confluent() | {"allow.auto.create.topics": False, "acks": "all"}
        producer = Producer(conf | self.variant.settings)
        while self._running(end):
            _seq, value = self._next()
            try:
                producer.produce(self.topic, value, on_delivery=delivered)
            except BufferError:
                self.sent_at.pop()
            producer.poll(0)
            self._halt.wait(1 / FAILOVER_RATE)
        self.undelivered = producer.flush(60)

    def _run_kafka_python(self, end: float) -> None:
        from kafka import KafkaProducer  # type: ignore[import-untyped]

        producer = KafkaProducer(**self.endpoint.python(), acks="all", **self.variant.settings)
        while self._running(end):
            seq, value = self._next()
            try:
                future = producer.send(self.topic, value)
            except Exception as exc:  # noqa: BLE001 - a send refused locally is counted
                self.errors.append(str(exc))
            else:
                future.add_callback(lambda _meta, seq=seq: self._acked(seq))
                future.add_errback(lambda exc: self.errors.append(str(exc)))
            self._halt.wait(1 / FAILOVER_RATE)
        try:
            producer.flush(60)
        finally:
            self.undelivered = len(self.sent_at) - len(self.acked) - len(self.errors)
            producer.close(10)

    async def _run_aiokafka(self, end: float) -> None:
        from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

        producer = AIOKafkaProducer(**self.endpoint.python(), acks="all", **self.variant.settings)
        await producer.start()

        def settled(seq: int, future: asyncio.Future[Any]) -> None:
            if future.cancelled():
                self.errors.append("cancelled")
            elif future.exception() is not None:
                self.errors.append(str(future.exception()))
            else:
                self._acked(seq)

        try:
            while self._running(end):
                seq, value = self._next()
                try:
                    future = await producer.send(self.topic, value)
                except Exception as exc:  # noqa: BLE001 - a send refused locally is counted
                    self.errors.append(str(exc))
                else:
                    future.add_done_callback(lambda f, seq=seq: settled(seq, f))
                await asyncio.sleep(1 / FAILOVER_RATE)
            await asyncio.wait_for(producer.flush(), 60)
        finally:
            self.undelivered = len(self.sent_at) - len(self.acked) - len(self.errors)
            await producer.stop()


def read_back(conf: dict[str, Any], topic: str, timeout: float) -> list[int]:
    """Every record number in partition 0 up to its high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(conf | {"group.id": f"bench-{topic}", "enable.auto.commit": False})
    got: list[int] = []
    try:
        high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        last, deadline = -1, time.monotonic() + timeout
        while last < high - 1 and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                value = msg.value()
                if msg.error() is None and isinstance(value, bytes):
                    got.append(struct.unpack_from(">Q", value)[0])
                    last = max(last, msg.offset() or 0)
    finally:
        consumer.close()
    return got


def _since(at: float | None, start: float) -> float | None:
    return None if at is None else round(at - start, 3)


def _kill_leader(
    nodes: Cluster, admin: Any, topic: str, producer: ContinuousProducer, timeout: float
) -> dict[str, Any]:
    """SIGKILL the leader of ``topic``; time the failover; restart it and wait for the ISR."""
    victim = leader_of(admin, topic, timeout)
    since = nodes.controller_log.stat().st_size
    offsets = {b: nodes.log_path(b).stat().st_size for b in nodes.brokers}
    killed_at = time.time()
    nodes.kill(victim)
    producer.mark()  # records sent from now on cannot be acked by the dead leader
    run: dict[str, Any] = {"killed": victim, "resumed_s": None}
    try:
        wait_until(lambda: producer.resumed_at is not None, timeout, "producing to resume")
        run["resumed_s"] = _since(producer.resumed_at, killed_at)
    except TimeoutError:
        _tell_stalled(nodes, admin, topic, producer, since, offsets)
    fenced, elected = _controller_events(nodes.controller_log, since, victim)
    run["fenced_s"], run["elected_s"] = _since(fenced, killed_at), _since(elected, killed_at)
    after = _partition(admin, topic)
    run["new_leader"] = after[0] if after else None
    nodes.start(victim)
    rejoined = wait_until(lambda: in_sync(admin, topic, 3), timeout, "the ISR to be whole again")
    run["rejoined_isr_s"] = round(rejoined, 3)
    return run


def _tell_stalled(
    nodes: Cluster,
    admin: Any,
    topic: str,
    producer: ContinuousProducer,
    since: int,
    offsets: dict[int, int],
) -> None:
    """Stderr: what the cluster and the producer looked like when producing did not
    resume (the partition's state, the errors seen, the logs written since the kill)."""
    print(
        f"producing to {topic} did not resume; partition (leader, replicas, isr) "
        f"{_partition(admin, topic)}; produce errors {sorted(set(producer.errors))[:5]}",
        file=sys.stderr,
    )
    logs = [("controller", nodes.controller_log, since)]
    logs += [(f"broker {b}", nodes.log_path(b), at) for b, at in sorted(offsets.items())]
    for name, path, at in logs:
        lines = path.read_bytes()[at:].decode(errors="replace").splitlines()
        print(f"--- {name} since the kill (last 40 of {len(lines)} lines):", file=sys.stderr)
        print("\n".join(lines[-40:]), file=sys.stderr)


def failover(
    nodes: Cluster, admin: Any, kills: int, timeout: float, variant: Variant = VARIANTS[0]
) -> dict[str, Any]:
    topic = create_topic(admin, 3, timeout, min_isr=2)
    conf = nodes.conf
    producer = ContinuousProducer(
        nodes.endpoint, topic, lifetime=kills * (3 * timeout + 10) + 60, variant=variant
    )
    producer.start()
    runs: list[dict[str, Any]] = []
    failure = None
    try:
        for i in range(kills):
            time.sleep(1.0 + (i * 0.7) % 2.0)  # spread the kills over the heartbeat period
            wait_until(lambda: in_sync(admin, topic, 3), timeout, "all three replicas in sync")
            count = len(producer.acked)
            wait_until(producer.acked_beyond(count), timeout, "acks=all to succeed")
            runs.append(_kill_leader(nodes, admin, topic, producer, timeout))
    except TimeoutError as exc:
        failure = str(exc)  # reported; the records acknowledged so far are still checked
    finally:
        producer.stop()
        producer.join(90)
    consumed = read_back(conf, topic, timeout)
    lost = len(producer.acked - set(consumed))
    delete_topic(admin, topic)
    resumed = _series([r["resumed_s"] for r in runs if r["resumed_s"] is not None])
    return {
        "client": variant.client,
        "variant": variant.label,
        "client_settings": variant.settings,
        "kills": len(runs),
        "timeouts": sum(1 for r in runs if r["resumed_s"] is None),
        "failure": failure,
        "seconds_median": resumed["median"],
        "seconds_p90": resumed["p90"],
        "seconds_max": resumed["max"],
        "fenced_s": _series([r["fenced_s"] for r in runs if r["fenced_s"] is not None]),
        "elected_s": _series([r["elected_s"] for r in runs if r["elected_s"] is not None]),
        "rejoined_isr_s_median": _series([r["rejoined_isr_s"] for r in runs])["median"],
        "runs": runs,
        "producer_rate_per_s": FAILOVER_RATE,
        "produced": len(producer.sent_at),
        "acked": len(producer.acked),
        "produce_errors": len(producer.errors),
        "produce_error_samples": sorted(set(producer.errors))[:3],
        "undelivered": producer.undelivered,
        "consumed": len(consumed),
        "duplicates": len(consumed) - len(set(consumed)),
        "lost": lost,
        "lost_of_acked": f"{lost}/{len(producer.acked)}",
        "target_s": FAILOVER_TARGET_S,
    }


# --- main -----------------------------------------------------------------------------------


def _broker_log_problems(work: Path) -> None:
    """Tell stderr about tracebacks in the brokers' and the controller's logs."""
    for log in sorted(work.glob("*.log")):
        text = log.read_text(errors="replace")
        count = text.count("Traceback")
        if count:
            at = text.index("Traceback")
            print(
                f"{log.name}: {count} tracebacks; first:\n{text[at - 300 : at + 1500]}",
                file=sys.stderr,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs of each kind")
    parser.add_argument("--kills", type=int, default=20, help="leader kills per series")
    parser.add_argument(
        "--short-lease", type=int, default=0, help="lease (s) of a second kill series; 0: none"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on every wait (s)")
    parser.add_argument("--keep", action="store_true", help="keep the logs and data directories")
    parser.add_argument(
        "--only",
        choices=["produce", "latency", "failover"],
        action="append",
        help="run only these workloads (repeatable; default: all)",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=0, help="length of each latency run (s)"
    )
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help="failover series for these client libraries (comma-separated; default: all)",
    )
    args = parser.parse_args(argv)
    scale = 0.02 if args.quick else 1.0
    repeats = 1 if args.quick else args.repeats
    kills = 2 if args.quick else args.kills
    work = Path(tempfile.mkdtemp(prefix="millrace-replication-bench-"))
    try:
        database = f"millrace_bench_replication_{os.getpid()}"
        with metadata_database("postgres", database) as database_url:
            assert database_url is not None
            # Every broker proves the same secret to the others when it fetches from them.
            extra = {
                "DATABASE_URL": database_url,
                "MILLRACE_INTERNAL_SECRET": secrets.token_hex(32),
            }
            env = bench_env(work, extra)
            prepare_store(env)
            ports = {broker_id: free_port() for broker_id in BROKER_IDS}
            _run(work, env, ports, args, scale, repeats, kills)
    finally:
        _broker_log_problems(work)
        if args.keep:
            print(f"logs and data kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _run(
    work: Path,
    env: dict[str, str],
    ports: dict[int, int],
    args: argparse.Namespace,
    scale: float,
    repeats: int,
    kills: int,
) -> None:
    from confluent_kafka.admin import AdminClient

    settings = run_step(env, "bench.store", "settings")
    key = run_step(env, "bench.store", "credentials", "bench-replication")
    common = {
        "brokers": len(BROKER_IDS),
        "metadata_store": "postgres",
        "cpus": os.cpu_count(),
        "pinned": False,
        "replica_lag_time_max_ms": settings["replica_lag_time_max_ms"],
        "replica_fetch_wait_ms": settings["replica_fetch_wait_ms"],
    }
    replicated = {"replication_factor": 3, "min_insync_replicas": 2, "acks": "all"}
    failover_common = {
        "broker_heartbeat_s": settings["lease_seconds"] / 4,  # as manage.py broker sets it
        "controller_tick_s": 1.0,
        **replicated,
        **common,
    }
    wanted = set(args.only or ["produce", "latency", "failover"])
    with cluster(work, env, ports, key) as nodes:
        admin = AdminClient(nodes.conf)
        if "produce" in wanted:
            _produce(nodes, admin, args, scale, repeats, replicated, common)
        if "latency" in wanted:
            _latency(nodes, admin, args, replicated, common)
        if "failover" in wanted:
            clients = {c.strip() for c in args.clients.split(",") if c.strip()}
            unknown = clients - set(CLIENTS)
            if unknown:
                raise SystemExit(f"unknown client(s): {', '.join(sorted(unknown))}")
            for variant in (v for v in VARIANTS if v.client in clients):
                series = failover(nodes, admin, kills, args.timeout, variant)
                emit(
                    "leader_kill9_failover",
                    lease_seconds=settings["lease_seconds"],
                    **failover_common,
                    **series,
                )
    if args.short_lease > 0:
        lease = {"MILLRACE_BROKER_LEASE_SECONDS": str(args.short_lease)}
        with cluster(work, env | lease, ports, key) as nodes:
            admin = AdminClient(nodes.conf)
            series = failover(nodes, admin, kills, args.timeout)
            emit(
                f"leader_kill9_failover_lease_{args.short_lease}s",
                lease_seconds=args.short_lease,
                **{**failover_common, "broker_heartbeat_s": args.short_lease / 4},
                **series,
            )


def _produce(
    nodes: Cluster,
    admin: Any,
    args: argparse.Namespace,
    scale: float,
    repeats: int,
    replicated: dict[str, Any],
    common: dict[str, Any],
) -> None:
    records = int(PRODUCE_RECORDS * scale)
    result = produce_throughput(nodes, admin, records, repeats, args.timeout)
    emit(
        "produce_100b_acks_all_rf3",
        records=records,
        record_bytes=100,
        repeats=repeats,
        partitions=1,
        linger_ms=5,
        batch_bytes=2**20,
        target_ratio=0.5,
        **replicated,
        **common,
        **result,
    )


def _latency(
    nodes: Cluster,
    admin: Any,
    args: argparse.Namespace,
    replicated: dict[str, Any],
    common: dict[str, Any],
) -> None:
    seconds = args.latency_seconds or (2.0 if args.quick else 20.0)
    latency = e2e_latency(nodes, admin, seconds, LATENCY_LINGER_MS, args.timeout)
    # For comparison: the batching perf.py uses for throughput (fewer, larger requests).
    batched = e2e_latency(nodes, admin, seconds, 5, args.timeout)
    emit(
        "e2e_latency_1kib_acks_all_rf3",
        record_bytes=LATENCY_BYTES,
        rate_per_s=LATENCY_RATE,
        seconds=seconds,
        measured_from="intended send time",
        target_p50_ms=5,
        target_p99_ms=20,
        **replicated,
        **common,
        **latency,
        with_linger_5ms={k: batched[k] for k in BATCHED_FIELDS},
    )


if __name__ == "__main__":
    sys.exit(main())
