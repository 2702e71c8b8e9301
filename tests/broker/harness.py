"""Fault injection for replicated brokers (Step 5), in the spirit of Jepsen.

Broker processes run on loopback; a producer writes unique integers at a fixed rate with
acks=all while a nemesis kills (``kill -9``), pauses (SIGSTOP/SIGCONT), restarts
(SIGTERM) or cuts off one broker at a time. Then everything heals, the topic is read
from offset 0 to the high watermark, and :func:`check` compares that read with what the
producer was told and what a consumer saw during the faults.

The pieces:

* :class:`Controller`: ``controller_tick`` every 0.5 s (and preferred-leader election now
  and then) on its own autocommit connection, the role Celery beat plays in production.
  The test's own connection is inside the test transaction and would never commit.
* :class:`Network` and :class:`Proxy`: one TCP proxy per broker. Brokers advertise their
  proxy's port, so clients and the other brokers reach a broker only through its proxy,
  while the broker itself still reaches Postgres. :meth:`Network.cut` isolates a broker:
  its connections, inbound and outbound (replica fetchers are told apart by their client
  id ``millrace-replica-<id>``), are closed at once and new ones refused ("refuse"), or
  silently dropped until the cut heals ("blackhole").
* :class:`Workload`: confluent-kafka, acks=all, idempotence off; records every value's
  outcome (acknowledged partition and offset, or the error).
* :class:`Observer`: a consumer reading while faults happen.
* :func:`make_schedule` and :class:`Nemesis`: a seeded sequence of faults.
* :func:`run_chaos`: all of it, ending in :func:`check`'s :class:`Report`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import signal
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection

from control_plane.catalog.models import Partition, Topic
from control_plane.controller import services as controller_services
from tests.broker.conftest import KafkaEnv, confluent_conf, start_broker, stop_broker

logger = logging.getLogger("millrace.chaos")
KINDS = ("kill9", "pause", "restart", "cut")
CUT_MODES = ("refuse", "blackhole")
REPLICA_CLIENT = re.compile(r"millrace-replica-(\d+)$")
LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"  # the brokers' log format (settings.LOGGING)


class Clock:
    """Seconds since the run started, and the wall-clock time of such a moment."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._wall0 = datetime.now()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def wall(self, t: float) -> datetime:
        return self._wall0 + timedelta(seconds=t)


# --- the controller -----------------------------------------------------------------------


class Controller:
    """Runs the controller in a thread until stopped; records the changes it makes."""

    def __init__(self, clock: Clock, every: float = 0.5, preferred_every: float = 10.0):
        self.clock = clock
        self.every = every
        self.preferred_every = preferred_every
        self.changes: list[tuple[float, controller_services.Change]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-controller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)

    def _run(self) -> None:
        next_preferred = time.monotonic() + self.preferred_every
        try:
            while not self._stop.wait(self.every):
                try:
                    changes = controller_services.controller_tick()
                    if self.preferred_every and time.monotonic() >= next_preferred:
                        next_preferred = time.monotonic() + self.preferred_every
                        changes += controller_services.preferred_leader_election()
                except Exception:  # a database blip; the next tick retries
                    self.errors += 1
                    logger.exception("controller tick failed")
                    connection.close()
                    continue
                now = self.clock.now()
                self.changes.extend((now, c) for c in changes)
        finally:
            connection.close()


# --- the network ----------------------------------------------------------------------------


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _client_id(payload: bytes) -> str:
    """The client id in a request (after the size): api key, version, correlation id, then
    the id, a non-compact nullable string in every request header version (v1, v2)."""
    if len(payload) < 10:
        return ""
    (length,) = struct.unpack_from(">h", payload, 8)
    return payload[10 : 10 + max(length, 0)].decode(errors="replace")


class Link:
    """One proxied connection; ``src`` is the broker that opened it (None: a client)."""

    def __init__(
        self, client: socket.socket, upstream: socket.socket | None, src: int | None, dst: int
    ):
        self.client = client
        self.upstream = upstream
        self.src = src
        self.dst = dst
        self.blackholed = False

    def touches(self, broker_id: int) -> bool:
        return broker_id in (self.src, self.dst)

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class Network:
    """The proxies in front of every broker, and which broker is cut off."""

    def __init__(self) -> None:
        self.proxies: dict[int, Proxy] = {}
        self.refused = 0  # connections refused or held while their broker was cut off
        self._lock = threading.Lock()
        self._links: set[Link] = set()
        self._isolated: dict[int, str] = {}

    def proxy(self, broker_id: int) -> Proxy:
        proxy = Proxy(self, broker_id)
        self.proxies[broker_id] = proxy
        return proxy

    def mode_for(self, src: int | None, dst: int) -> str | None:
        """Under the lock: how a connection from ``src`` to ``dst`` is cut, if it is."""
        return self._isolated.get(dst) or (self._isolated.get(src) if src is not None else None)

    def admit(self, link: Link) -> str | None:
        """Register a new connection unless it is cut (then refuse or hold it)."""
        with self._lock:
            mode = self.mode_for(link.src, link.dst)
            if mode is not None:
                self.refused += 1
            if mode == "refuse":
                return mode
            link.blackholed = mode == "blackhole"
            self._links.add(link)
            return mode

    def drop(self, link: Link) -> None:
        with self._lock:
            self._links.discard(link)
        link.close()

    def cut(self, broker_id: int, mode: str) -> int:
        """Cut ``broker_id`` off from clients and the other brokers; returns how many
        connections were closed ("refuse") or silenced ("blackhole")."""
        assert mode in CUT_MODES
        with self._lock:
            self._isolated[broker_id] = mode
            hit = [link for link in self._links if link.touches(broker_id)]
            for link in hit:
                if mode == "refuse":
                    self._links.discard(link)
                else:
                    link.blackholed = True
        if mode == "refuse":
            for link in hit:
                link.close()
        return len(hit)

    def heal(self, broker_id: int) -> None:
        """Let ``broker_id`` be reached again. Silenced connections lost bytes midstream,
        so they are closed: both ends reconnect, as after a real partition."""
        with self._lock:
            self._isolated.pop(broker_id, None)
            stale = [
                link
                for link in self._links
                if link.blackholed and self.mode_for(link.src, link.dst) is None
            ]
            for link in stale:
                self._links.discard(link)
        for link in stale:
            link.close()

    def heal_all(self) -> None:
        for broker_id in list(self._isolated):
            self.heal(broker_id)

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        with self._lock:
            links, self._links = list(self._links), set()
        for link in links:
            link.close()


class Proxy:
    """Listens on a port of its own and forwards each connection to one broker."""

    def __init__(self, network: Network, broker_id: int) -> None:
        self.network = network
        self.broker_id = broker_id
        self.upstream_port: int | None = None  # set once the broker's port is known
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.5)
        self.port: int = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name=f"proxy-{broker_id}", daemon=True).start()

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        # The first request (ApiVersions or SaslHandshake) names the client: a broker's
        # replica fetcher is "millrace-replica-<id>", and a cut applies to it too.
        try:
            client.settimeout(10)
            size = _recv_exactly(client, 4)
            first = size + _recv_exactly(client, struct.unpack(">i", size)[0])
        except (OSError, struct.error):
            Link(client, None, None, self.broker_id).close()
            return
        found = REPLICA_CLIENT.match(_client_id(first[4:]))
        src = int(found.group(1)) if found else None
        upstream = None
        if self.upstream_port is not None:
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 5)
            except OSError:
                upstream = None
        link = Link(client, upstream, src, self.broker_id)
        if upstream is None:
            link.close()  # the broker is down: as if the connection were refused
            return
        mode = self.network.admit(link)
        if mode == "refuse":
            link.close()
            return
        client.settimeout(None)
        upstream.settimeout(None)
        if mode is None:
            try:
                upstream.sendall(first)
            except OSError:
                self.network.drop(link)
                return
        threading.Thread(target=self._pump, args=(link, client, upstream), daemon=True).start()
        self._pump(link, upstream, client)

    def _pump(self, link: Link, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                if not link.blackholed:
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            self.network.drop(link)


# --- the workload ---------------------------------------------------------------------------


@dataclass
class Outcome:
    partition: int  # the partition it was sent to
    sent: float  # run time it was handed to the producer
    done: float | None = None  # run time of its delivery report
    acked_partition: int | None = None
    offset: int | None = None  # acknowledged at this offset
    error: str | None = None  # or failed with this (indeterminate: it may still be written)
    handed_over: bool = True  # False: the local queue refused it, it never left


def _int_value(raw: bytes | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


class Workload(threading.Thread):
    """A producer thread: unique integers at a fixed rate, spread over every partition."""

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        partitions: int,
        clock: Clock,
        *,
        rate: float = 200.0,
        max_count: int = 1_000_000,
        max_seconds: float = 3600.0,
        flush_seconds: float = 60.0,
    ) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.conf = {
            **conf,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 5,
            "request.timeout.ms": 4000,
            "message.timeout.ms": 10_000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "socket.connection.setup.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3,  # errors: disconnects and timeouts are the point here
        }
        self.topic = topic
        self.partitions = partitions
        self.clock = clock
        self.rate = rate
        self.max_count = max_count
        self.max_seconds = max_seconds
        self.flush_seconds = flush_seconds
        self.outcomes: dict[int, Outcome] = {}
        self.produced = 0
        self.unflushed = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(self.conf)
        start = time.monotonic()
        value = 0
        while (
            not self._halt.is_set()
            and value < self.max_count
            and time.monotonic() - start < self.max_seconds
        ):
            wait = start + value / self.rate - time.monotonic()
            if wait > 0:
                producer.poll(min(wait, 0.05))
                continue
            partition = value % self.partitions
            outcome = Outcome(partition, self.clock.now())
            self.outcomes[value] = outcome
            data = b"%d" % value
            try:
                producer.produce(
                    self.topic, value=data, key=data, partition=partition, on_delivery=self._done
                )
            except BufferError:
                outcome.handed_over, outcome.error = False, "local queue full"
                outcome.done = self.clock.now()
            value += 1
            producer.poll(0)
        self.produced = value
        self.unflushed = producer.flush(self.flush_seconds)

    def _done(self, err: Any, msg: Any) -> None:
        value = _int_value(msg.value())
        outcome = self.outcomes.get(value) if value is not None else None
        if outcome is None:
            return
        outcome.done = self.clock.now()
        if err is None:
            outcome.acked_partition, outcome.offset = msg.partition(), msg.offset()
        else:
            outcome.error = err.name()


class Observer(threading.Thread):
    """A consumer reading every partition from offset 0 while the faults happen."""

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        partitions: int,
        clock: Clock,
        decode: Callable[[bytes | None], Any] = _int_value,
    ):
        super().__init__(name="chaos-observer", daemon=True)
        self.decode = decode
        self.conf = {
            **conf,
            "group.id": f"chaos-observer-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "socket.connection.setup.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3,
        }
        self.topic = topic
        self.partitions = partitions
        self.clock = clock
        self.seen: list[tuple[int, int, Any, float]] = []  # partition, offset, value, t
        self.errors: Counter[str] = Counter()
        self.rewinds = 0  # times it read an offset again (an offset reset)
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.conf)
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        last: dict[int, int] = {}
        try:
            while not self._halt.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors[msg.error().name()] += 1
                    continue
                partition, offset = msg.partition(), msg.offset()
                if offset <= last.get(partition, -1):
                    self.rewinds += 1
                last[partition] = offset
                self.seen.append((partition, offset, self.decode(msg.value()), self.clock.now()))
        finally:
            consumer.close()


def high_watermarks(consumer: Any, topic: str, partitions: int, deadline: float) -> dict[int, int]:
    """Each partition's high watermark as ``consumer`` is told it, asked again while the
    cluster cannot answer (a broker coming back) until ``deadline`` (monotonic)."""
    from confluent_kafka import KafkaException, TopicPartition

    ends: dict[int, int] = {}
    for p in range(partitions):
        while True:
            try:
                _, ends[p] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=10, cached=False
                )
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    return ends


def read_all(
    conf: dict[str, Any], topic: str, partitions: int, seconds: float = 120.0
) -> tuple[dict[int, list[tuple[int, int | None]]], dict[int, int]]:
    """Every record from offset 0 to each partition's high watermark: (offset, value) per
    partition, and the high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": f"chaos-final-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "log_level": 3,
        }
    )
    deadline = time.monotonic() + seconds
    try:
        ends = high_watermarks(consumer, topic, partitions, deadline)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[tuple[int, int | None]]] = {p: [] for p in range(partitions)}
        done = {p for p in range(partitions) if ends[p] == 0}
        errors: Counter[str] = Counter()
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                errors[msg.error().name()] += 1
                continue
            p, offset = msg.partition(), msg.offset()
            if offset < ends[p]:
                got[p].append((offset, _int_value(msg.value())))
            if offset >= ends[p] - 1:
                done.add(p)
        if len(done) < partitions:
            progress = {p: (got[p][-1][0] if got[p] else None, ends[p]) for p in range(partitions)}
            raise AssertionError(
                f"final read incomplete after {seconds} s: (last offset, high watermark) "
                f"{progress}, errors {dict(errors)}"
            )
        return got, ends
    finally:
        consumer.close()


# --- faults -------------------------------------------------------------------------------


@dataclass
class Fault:
    index: int
    kind: str  # one of KINDS
    target: tuple[str, int]  # ("broker", id) or ("leader", partition): resolved when it runs
    seconds: float  # down / paused / cut for this long (a restart: 0)
    gap: float  # pause before it
    mode: str = ""  # a cut: "refuse" or "blackhole"
    broker: int | None = None
    start: float | None = None
    end: float | None = None  # the broker reachable again
    recovered: float | None = None  # every ISR full again (None: not within the timeout)

    def describe(self) -> str:
        what = f"{self.kind} broker {self.broker}"
        if self.kind == "cut":
            what += f" ({self.mode})"
        if self.seconds:
            what += f" for {self.seconds:.1f} s"
        return f"fault {self.index} {what} [target {self.target[0]} {self.target[1]}]"


def make_schedule(
    seed: int,
    count: int,
    brokers: int = 3,
    partitions: int = 3,
    max_seconds: float = 6.0,
    max_gap: float = 2.0,
) -> list[Fault]:
    """A seeded fault sequence; the first four cover every kind (in a seeded order)."""
    rng = random.Random(seed)
    first = list(KINDS)
    rng.shuffle(first)
    faults = []
    for index in range(count):
        kind = first[index] if index < len(first) else rng.choice(KINDS)
        if rng.random() < 0.5:
            target = ("leader", rng.randrange(partitions))
        else:
            target = ("broker", rng.randint(1, brokers))
        seconds = 0.0 if kind == "restart" else round(rng.uniform(1.0, max_seconds), 1)
        mode = rng.choice(CUT_MODES) if kind == "cut" else ""
        gap = round(rng.uniform(0.5, max_gap), 1)
        faults.append(Fault(index, kind, target, seconds, gap, mode))
    return faults


def partition_rows(topic: Topic) -> list[Partition]:
    return list(Partition.objects.filter(topic=topic).order_by("index"))


def healthy(topic: Topic) -> bool:
    """Every partition has a leader and its full replica set in sync."""
    rows = partition_rows(topic)
    return bool(rows) and all(
        p.leader is not None and sorted(p.isr) == sorted(p.replicas) for p in rows
    )


def wait_healthy(topic: Topic, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if healthy(topic):
            return True
        time.sleep(0.2)
    return healthy(topic)


class Nemesis:
    """Carries out faults on the cluster, one broker at a time."""

    def __init__(self, cluster: list[KafkaEnv], network: Network, clock: Clock, topic: Topic):
        self.cluster = cluster
        self.network = network
        self.clock = clock
        self.topic = topic
        self.paused: set[int] = set()
        self.problems: list[str] = []  # e.g. a graceful stop that did not exit cleanly

    def env(self, broker_id: int) -> KafkaEnv:
        return next(k for k in self.cluster if k.broker_id == broker_id)

    def resolve(self, fault: Fault) -> int:
        kind, n = fault.target
        if kind == "leader":
            rows = partition_rows(self.topic)
            if n < len(rows) and rows[n].leader is not None:
                return int(rows[n].leader)
            return self.cluster[n % len(self.cluster)].broker_id
        return n

    def mark(self, text: str) -> None:
        """A line in every broker's log, to find one's way in them afterwards."""
        now = self.clock.now()
        stamp = self.clock.wall(now).strftime(LOG_TIME)[:-3]
        for env in self.cluster:
            if env.log_path is not None:
                with open(env.log_path, "a") as log:
                    log.write(f"{stamp} CHAOS +{now:.2f}s {text}\n")

    def run(self, fault: Fault) -> None:
        broker_id = fault.broker = self.resolve(fault)
        env = self.env(broker_id)
        fault.start = self.clock.now()
        self.mark(f"begin {fault.describe()}")
        if fault.kind == "kill9":
            stop_broker(env, "kill")
            time.sleep(fault.seconds)
            start_broker(env)
        elif fault.kind == "pause":
            assert env.process is not None
            env.process.send_signal(signal.SIGSTOP)
            self.paused.add(broker_id)
            time.sleep(fault.seconds)
            env.process.send_signal(signal.SIGCONT)
            self.paused.discard(broker_id)
        elif fault.kind == "restart":
            code = stop_broker(env)
            if code != 0:
                self.problems.append(f"{fault.describe()}: SIGTERM exit code {code}")
            start_broker(env)
        elif fault.kind == "cut":
            self.network.cut(broker_id, fault.mode)
            time.sleep(fault.seconds)
            self.network.heal(broker_id)
        else:
            raise ValueError(fault.kind)
        fault.end = self.clock.now()
        self.mark(f"end {fault.describe()}")

    def restart_crashed(self, when: str) -> list[str]:
        """Brokers that exited by themselves (a bug: every fault restarts its broker)
        are started again; returns what happened."""
        found = []
        for env in self.cluster:
            if env.process is not None and env.process.poll() is not None:
                found.append(
                    f"broker {env.broker_id} exited by itself (code {env.process.returncode}) "
                    f"{when}; see {env.log_path}"
                )
                start_broker(env)
        return found

    def heal_all(self) -> None:
        """Everything back: SIGCONT, no cuts, every broker running."""
        for broker_id in list(self.paused):
            process = self.env(broker_id).process
            if process is not None:
                process.send_signal(signal.SIGCONT)
            self.paused.discard(broker_id)
        self.network.heal_all()
        for env in self.cluster:
            if env.process is None or env.process.poll() is not None:
                start_broker(env)
        self.mark("healed")


# --- the checker ----------------------------------------------------------------------------


@dataclass
class Violation:
    what: str
    partition: int
    value: int | None = None
    offsets: str = ""  # where it was acknowledged / seen / found
    t_from: float = 0.0  # the run times it concerns (for faults and log lines around it)
    t_to: float = 0.0


@dataclass
class Report:
    summary: dict[str, Any]
    violations: list[Violation] = field(default_factory=list)


def check(
    outcomes: dict[int, Outcome],
    final: dict[int, list[tuple[int, int | None]]],
    seen: list[tuple[int, int, int | None, float]],
    partitions: int,
) -> Report:
    """Compare the final read with the producer's outcomes and the observer's reads.

    Violations (bugs): an acknowledged value not at the offset it was acknowledged at
    (lost, or another value in its place), two records at one offset, a value that was
    never sent (or in another partition than it was sent to), an acknowledged write placed
    before one acknowledged earlier (real-time order), a record the observer read that is
    not at that offset in the final read (read beyond the high watermark, later truncated).
    Reported, not failed: duplicates (client retries, idempotence off) and failed or
    unreported writes that landed anyway (a failed delivery is indeterminate).
    """
    violations: list[Violation] = []
    at: dict[tuple[int, int], int | None] = {}
    where: dict[int, list[tuple[int, int]]] = {}
    gaps = 0
    for p, records in final.items():
        previous = -1
        for offset, value in records:
            if offset <= previous:
                violations.append(
                    Violation(
                        "offsets out of order in the final read (two records at one offset?)",
                        p,
                        value,
                        f"offset {offset} after {previous}",
                    )
                )
            elif offset != previous + 1:
                gaps += 1
            previous = offset
            if (p, offset) in at and at[p, offset] != value:
                violations.append(
                    Violation(
                        "two values at one offset",
                        p,
                        value,
                        f"offset {offset} holds {at[p, offset]} and {value}",
                    )
                )
            at[p, offset] = value
            if value is None or value not in outcomes:
                violations.append(
                    Violation("a record that was never sent", p, value, f"offset {offset}")
                )
                continue
            where.setdefault(value, []).append((p, offset))
            outcome = outcomes[value]
            if not outcome.handed_over:
                violations.append(
                    Violation(
                        "a value the producer never handed over is in the log",
                        p,
                        value,
                        f"offset {offset}",
                        outcome.sent,
                        outcome.sent,
                    )
                )
            if outcome.partition != p:
                violations.append(
                    Violation(
                        f"a value sent to partition {outcome.partition} is in partition {p}",
                        p,
                        value,
                        f"offset {offset}",
                        outcome.sent,
                        outcome.done or outcome.sent,
                    )
                )

    acked = failed = unreported = landed_failed = landed_unreported = 0
    errors: Counter[str] = Counter()
    for value, o in outcomes.items():
        t_to = o.done if o.done is not None else o.sent
        if o.offset is not None:
            acked += 1
            p = o.acked_partition if o.acked_partition is not None else o.partition
            held = at.get((p, o.offset), "nothing")
            if held != value:
                found = ", ".join(f"{fp}@{fo}" for fp, fo in where.get(value, [])) or "nowhere"
                what = "lost" if value not in where else "misplaced"
                violations.append(
                    Violation(
                        f"{what}: an acknowledged value is not at its acknowledged offset",
                        p,
                        value,
                        f"acknowledged at {p}@{o.offset}, which holds {held}; found at {found}",
                        o.sent,
                        t_to,
                    )
                )
        elif o.error is not None:
            failed += 1
            errors[o.error] += 1
            landed_failed += value in where
        else:
            unreported += 1
            landed_unreported += value in where

    # Real-time order: a write sent after another was acknowledged lands after it.
    for p in range(partitions):
        acks = sorted(
            (o.done, o.offset, v)
            for v, o in outcomes.items()
            if o.offset is not None and o.done is not None and o.acked_partition == p
        )
        sends = sorted(
            (o.sent, o.offset, v)
            for v, o in outcomes.items()
            if o.offset is not None and o.acked_partition == p
        )
        i, highest, highest_value = 0, -1, None
        for sent, offset, value in sends:
            while i < len(acks) and acks[i][0] < sent:
                if acks[i][1] > highest:
                    highest, highest_value = acks[i][1], acks[i][2]
                i += 1
            if offset <= highest:
                violations.append(
                    Violation(
                        "acknowledged before this value was sent, yet at a later offset",
                        p,
                        value,
                        f"{value} at {p}@{offset}; {highest_value} at {p}@{highest}",
                        outcomes[highest_value].sent if highest_value is not None else sent,
                        outcomes[value].done or sent,
                    )
                )

    mismatched_reads = 0
    for p, offset, value, t in seen:
        held = at.get((p, offset), "nothing")
        if held != value:
            mismatched_reads += 1
            if mismatched_reads <= 50:
                violations.append(
                    Violation(
                        "a consumer read a record that is not in the final log at that offset",
                        p,
                        value,
                        f"read {value} at {p}@{offset} (t={t:.2f}); the log holds {held}",
                        max(0.0, t - 10),
                        t,
                    )
                )

    duplicates = sum(1 for places in where.values() if len(places) > 1)
    summary = {
        "produced": len(outcomes),
        "acked": acked,
        "failed": failed,
        "failed_by_error": dict(errors),
        "unreported": unreported,
        "final_records": sum(len(r) for r in final.values()),
        "duplicates": duplicates,
        "indeterminate_landed": landed_failed + landed_unreported,
        "lost": sum(1 for v in violations if v.what.startswith("lost")),
        "misplaced": sum(1 for v in violations if v.what.startswith("misplaced")),
        "observed_reads": len(seen),
        "mismatched_reads": mismatched_reads,
        "offset_gaps": gaps,
        "violations": len(violations),
    }
    return Report(summary, violations)


def log_excerpt(
    env: KafkaEnv, clock: Clock, t_from: float, t_to: float, needle: str, limit: int = 40
) -> list[str]:
    """Lines of a broker's log from that time window that mention ``needle`` (or are the
    harness's own markers, or warnings)."""
    if env.log_path is None or not Path(env.log_path).exists():
        return []
    lo, hi = clock.wall(t_from), clock.wall(t_to)
    out = []
    for line in Path(env.log_path).read_text(errors="replace").splitlines():
        try:
            stamp = datetime.strptime(line[:23], LOG_TIME)
        except ValueError:
            continue
        if not lo <= stamp <= hi:
            continue
        if needle in line or " CHAOS " in line or " WARNING " in line or " ERROR " in line:
            out.append(line)
    return out[-limit:]


def explain(
    report: Report,
    faults: list[Fault],
    controller: Controller,
    cluster: list[KafkaEnv],
    clock: Clock,
    topic: str,
    seed: int,
    limit: int = 5,
) -> str:
    """A failure message: each violation with the faults, controller decisions and broker
    log lines around it."""
    lines = [
        f"{len(report.violations)} violation(s); reproduce with CHAOS_SEED={seed} "
        f"CHAOS_FAULTS={len(faults)}",
        f"summary: {json.dumps(report.summary, sort_keys=True)}",
    ]
    for v in report.violations[:limit]:
        lo, hi = v.t_from - 10, v.t_to + 10
        lines.append(
            f"\n* {v.what}: value {v.value}, partition {v.partition}: {v.offsets} "
            f"(t {v.t_from:.2f}..{v.t_to:.2f})"
        )
        near = [
            f
            for f in faults
            if f.start is not None and f.start <= hi and (f.end if f.end is not None else hi) >= lo
        ]
        for f in near:
            end = f"{f.end:.2f}" if f.end is not None else "?"
            lines.append(f"  {f.describe()}: t {f.start:.2f}..{end}")
        for t, c in controller.changes:
            if lo <= t <= hi and c.partition == v.partition:
                lines.append(
                    f"  controller t {t:.2f}: leader {c.leader} epoch {c.leader_epoch} "
                    f"isr {list(c.isr)} ({c.reason})"
                )
        for env in cluster if v.partition >= 0 else []:
            excerpt = log_excerpt(env, clock, lo, hi, f"{topic}-{v.partition}")
            if excerpt:
                lines.append(f"  broker-{env.broker_id}.log ({env.log_path}):")
                lines.extend(f"    {line}" for line in excerpt)
    if len(report.violations) > limit:
        lines.append(f"\n... and {len(report.violations) - limit} more:")
        lines.extend(
            f"  {v.what}: value {v.value}, partition {v.partition}: {v.offsets}"
            for v in report.violations[limit : limit + 30]
        )
    return "\n".join(lines)


# --- the run --------------------------------------------------------------------------------


def _log_bytes(env: KafkaEnv, topic: Topic, index: int) -> bytes:
    assert env.data_dir is not None
    directory = Path(env.data_dir) / f"{topic.topic_id}-{index}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def wait_identical(cluster: list[KafkaEnv], topic: Topic, partitions: int, seconds: float) -> str:
    """'' once every partition's replicas hold the same bytes; else what differs."""
    deadline = time.monotonic() + seconds
    while True:
        differ = [
            p for p in range(partitions) if len({_log_bytes(k, topic, p) for k in cluster}) != 1
        ]
        if not differ:
            return ""
        if time.monotonic() > deadline:
            sizes = {p: [len(_log_bytes(k, topic, p)) for k in cluster] for p in differ}
            return f"replicas differ after {seconds:.0f} s (bytes per broker): {sizes}"
        time.sleep(0.5)


def run_chaos(
    cluster: list[KafkaEnv],
    network: Network,
    topic_name: str,
    partitions: int,
    faults: list[Fault],
    *,
    seed: int,
    rate: float = 200.0,
    recover_seconds: float = 30.0,
    say: Callable[[str], None] = print,
) -> tuple[Report, str]:
    """Produce under ``faults``, heal, read everything back and check it. Returns the
    report and, if anything was violated, the explanation."""
    clock = Clock()
    topic = Topic.objects.get(name=topic_name)
    conf = confluent_conf(cluster[0], cluster[0].admin_a)
    controller = Controller(clock)
    nemesis = Nemesis(cluster, network, clock, topic)
    budget = 120.0 + sum(f.seconds + f.gap + recover_seconds + 30 for f in faults)
    workload = Workload(
        conf,
        topic_name,
        partitions,
        clock,
        rate=rate,
        max_count=int(rate * budget) + 1,
        max_seconds=budget,
    )
    observer = Observer(conf, topic_name, partitions, clock)
    not_recovered: list[int] = []
    problems: list[str] = []
    controller.start()
    try:
        if not wait_healthy(topic, 60):
            raise AssertionError(f"the topic never became healthy: {partition_rows(topic)}")
        workload.start()
        observer.start()
        try:
            time.sleep(2.0)
            try:
                for fault in faults:
                    problems += nemesis.restart_crashed(f"before fault {fault.index}")
                    time.sleep(fault.gap)
                    nemesis.run(fault)
                    if wait_healthy(topic, recover_seconds):
                        fault.recovered = clock.now()
                    else:
                        not_recovered.append(fault.index)
                    say(
                        f"chaos t={clock.now():7.2f} {fault.describe()}: "
                        f"{fault.start:.2f}..{fault.end:.2f}, "
                        + (
                            f"ISR full at {fault.recovered:.2f}"
                            if fault.recovered
                            else "ISR not full"
                        )
                    )
                problems += nemesis.restart_crashed("after the last fault")
            finally:
                nemesis.heal_all()
            if not wait_healthy(topic, 120):
                problems.append(f"not healthy 120 s after healing: {partition_rows(topic)}")
            time.sleep(1.0)  # some load on the healed cluster
        finally:
            workload.stop()
            observer.stop()
            workload.join(workload.flush_seconds + 30)
            observer.join(30)
        if workload.is_alive():
            problems.append("the producer did not finish")
        differ = wait_identical(cluster, topic, partitions, 60)
        if differ:
            problems.append(differ)
        final, ends = read_all(conf, topic_name, partitions)
    finally:
        controller.stop()
    report = check(workload.outcomes, final, observer.seen, partitions)
    report.summary = {
        "seed": seed,
        "faults": len(faults),
        "faults_by_kind": dict(Counter(f.kind for f in faults)),
        "cuts_by_mode": dict(Counter(f.mode for f in faults if f.kind == "cut")),
        **report.summary,
        "high_watermarks": [ends[p] for p in range(partitions)],
        "observer_rewinds": observer.rewinds,
        "observer_errors": dict(observer.errors),
        "controller_changes": len(controller.changes),
        "controller_errors": controller.errors,
        "connections_refused_or_held": network.refused,
        "not_recovered": not_recovered,
        "unflushed": workload.unflushed,
        "duration_s": round(clock.now(), 1),
    }
    for problem in problems + nemesis.problems:
        report.violations.append(Violation(problem, -1))
    report.summary["violations"] = len(report.violations)
    text = ""
    if report.violations:
        text = explain(report, faults, controller, cluster, clock, topic_name, seed)
    return report, text
