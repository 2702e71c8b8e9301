"""At-least-once delivery across rebalances, with real consumers against a real broker.

For each assignor: numbered records are produced into 6 partitions in the background while
the group changes. A starts; B joins; B leaves cleanly; C, in another process, joins and is
killed with SIGKILL while it holds a batch it processed but never committed; A drains the
rest. Every member commits synchronously after each batch it processes and logs what it
processed and which commits the broker acknowledged, stamped with ``time.monotonic()``
(CLOCK_MONOTONIC: one clock for every process on Linux). The checks:

1. every record is processed at least once, and C's uncommitted batch is processed again;
2. the group's committed offsets (an OffsetFetch after every membership change, and every
   half second in between) never go backwards, always include every commit acknowledged
   before the fetch, and end at the log end offsets;
3. no record is processed after an acknowledged commit covered it, and every duplicate is a
   record from a batch whose commit was never acknowledged (C's held batch, or a commit
   refused during a rebalance): work processed but not committed when its member lost
   the partition.

Each in-process member runs in a thread of its own, as applications do: a synchronous
commit is queued behind its member's pending JoinGroup (a broker answers a connection's
requests in order), so one thread driving two members can deadlock until a request times
out, whatever the broker.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from tests.broker.conftest import ROOT, confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_groups import consumer, produce

pytestmark = pytest.mark.django_db

PARTITIONS = 6
ALL = list(range(PARTITIONS))
TOTAL = 3_000
CHUNK = 100  # records per produce() call
STEP = 300  # records the feed may add at each point of the scenario
SESSION = {"session.timeout.ms": 3000}
HOLD_AFTER = 40  # C holds (and is killed) after it committed this many records
SAMPLE_EVERY = 0.5


@dataclass
class Log:
    """One member's work: (t, partition, offset, value) processed, acknowledged commits
    (t, {partition: offset}), and the (partition, offset) of records it processed in a
    batch whose commit was not acknowledged for their partition."""

    name: str
    processed: list[tuple[float, int, int, int]] = field(default_factory=list)
    commits: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    uncommitted: list[tuple[int, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def batch_done(self, batch: list[tuple[int, int]], acked: dict[int, int] | None) -> None:
        if acked is not None:
            self.commits.append((time.monotonic(), acked))
        self.uncommitted += [(p, o) for p, o in batch if p not in (acked or {})]


class Worker(ABC):
    """A loop in a thread of its own; `check()` re-raises its failure in the test."""

    def __init__(self) -> None:
        self.stopping = False
        self.pool = ThreadPoolExecutor(1)
        self.future: Future[None] = self.pool.submit(self.run)

    @abstractmethod
    def run(self) -> None:
        """The loop; subclasses define it."""

    def check(self) -> None:
        if self.future.done():
            self.future.result()

    def stop(self, seconds: float = 30) -> None:
        self.stopping = True
        self.future.result(timeout=seconds)
        self.pool.shutdown()


class Member(Worker):
    """A member in this process, in its own thread: consume a batch, process it (record
    it), commit it synchronously."""

    def __init__(self, name, kafka, group, strategy, topic):
        self.log = Log(name)
        self.topic = topic
        self.partitions: list[int] = []  # as of the last step
        self.consumer = consumer(kafka, group, strategy, **SESSION)
        self.consumer.subscribe([topic])
        super().__init__()

    def run(self) -> None:
        try:
            while not self.stopping:
                self.step()
        finally:
            self.partitions = []
            self.consumer.close()  # leaves the group

    def step(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        batch = []
        for msg in self.consumer.consume(100, 0.05):
            if msg.error() is None:
                batch.append(msg)
            else:
                self.log.failures.append(f"message: {msg.error()}")
        self.partitions = sorted(tp.partition for tp in self.consumer.assignment())
        if not batch:
            return
        now = time.monotonic()
        upto = {}
        for msg in batch:
            self.log.processed.append((now, msg.partition(), msg.offset(), int(msg.value())))
            upto[msg.partition()] = msg.offset() + 1
        offsets = [TopicPartition(self.topic, p, o) for p, o in upto.items()]
        records = [(msg.partition(), msg.offset()) for msg in batch]
        try:
            done = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            self.log.failures.append(f"commit: {e}")
            self.log.batch_done(records, None)
            return
        self.log.batch_done(records, {tp.partition: tp.offset for tp in done if tp.error is None})


CHILD_SCRIPT = """
import json, sys, time
from confluent_kafka import Consumer, KafkaException, TopicPartition
conf, topic, hold_after = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = Consumer(conf)
c.subscribe([topic])
def out(**line):
    print(json.dumps({"t": time.monotonic(), **line}), flush=True)
assigned, committed = None, 0
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    batch = [m for m in c.consume(20, 0.05) if m.error() is None]
    now = sorted(tp.partition for tp in c.assignment())
    if now != assigned:
        assigned = now
        out(assigned=now)
    if not batch:
        continue
    out(processed=[[m.partition(), m.offset(), int(m.value())] for m in batch])
    if committed >= hold_after:
        out(hold=True)  # processed, never committed: the parent kills us now
        time.sleep(max(0, deadline - time.monotonic()))
        break
    upto = {m.partition(): m.offset() + 1 for m in batch}
    try:
        done = c.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in upto.items()], asynchronous=False
        )
    except KafkaException as e:
        out(failure=str(e))
        continue
    acked = {tp.partition: tp.offset for tp in done if tp.error is None}
    committed += sum(1 for m in batch if m.partition() in acked)
    out(committed=acked)
"""


class Child:
    """Member C in its own process, so that SIGKILL is real; a thread reads its JSON lines."""

    def __init__(self, kafka, group, strategy, topic):
        settings = {
            "partition.assignment.strategy": strategy,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 300,  # as consumer()'s
            **SESSION,
        }
        conf = json.dumps(confluent_conf(kafka, kafka.admin_a, **settings))
        args = [sys.executable, "-c", CHILD_SCRIPT, conf, topic, str(HOLD_AFTER)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.lines: list[dict] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                pass  # a line cut by SIGKILL (only when the test already failed)

    @property
    def partitions(self) -> list[int]:
        seen = [line["assigned"] for line in list(self.lines) if "assigned" in line]
        return seen[-1] if seen and self.proc.poll() is None else []

    def hold(self) -> dict | None:
        return next((line for line in list(self.lines) if "hold" in line), None)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.reader.join(10)

    def log(self) -> tuple[Log, list[tuple[int, int]]]:
        """C's log, and the (partition, offset) of the batch it held uncommitted."""
        log, batch = Log("C"), []
        for line in self.lines:
            if "processed" in line:
                batch = [(p, o) for p, o, _ in line["processed"]]
                log.processed += [(line["t"], p, o, v) for p, o, v in line["processed"]]
            elif "committed" in line:
                acked = {int(p): o for p, o in line["committed"].items()}
                log.commits.append((line["t"], acked))
                log.uncommitted += [(p, o) for p, o in batch if p not in acked]
                batch = []
            elif "failure" in line:
                log.failures.append(line["failure"])
                log.uncommitted += batch
                batch = []
        log.uncommitted += batch
        return log, batch


class Feed(Worker):
    """Produces TOTAL numbered records (value i into partition i % 6), in chunks, up to the
    budget the scenario allows so far: production runs during every membership change."""

    def __init__(self, kafka, topic):
        self.kafka, self.topic = kafka, topic
        self.allowed = self.produced = 0
        super().__init__()

    def allow(self, count: int) -> None:
        self.allowed = min(TOTAL, max(self.allowed, count))

    def more(self) -> None:
        self.allow(self.allowed + STEP)

    def run(self) -> None:
        while self.produced < TOTAL and not self.stopping:
            count = min(CHUNK, self.allowed - self.produced)
            if count <= 0:
                time.sleep(0.02)
                continue
            produce(self.kafka, self.topic, count, PARTITIONS, start=self.produced)
            self.produced += count
            time.sleep(0.05)


class Scenario:
    def __init__(self, kafka, strategy):
        self.kafka, self.strategy = kafka, strategy
        self.topic = topic_name("alo")
        confluent_create(kafka, kafka.admin_a, self.topic, partitions=PARTITIONS)
        self.group = f"g-{self.topic}"
        self.members: dict[str, Member] = {}
        self.child: Child | None = None
        # Never subscribes: it only reads the group's committed offsets (OffsetFetch).
        self.observer = consumer(kafka, self.group)
        self.samples: list[tuple[float, str, list[int]]] = []
        self.last_sample = 0.0
        self.feed = Feed(kafka, self.topic)

    def join(self, name: str) -> Member:
        self.members[name] = Member(name, self.kafka, self.group, self.strategy, self.topic)
        return self.members[name]

    def assignment(self) -> dict[str, list[int]]:
        out = {name: m.partitions for name, m in self.members.items() if not m.stopping}
        if self.child is not None:
            out["C"] = self.child.partitions
        return out

    def settled(self, sizes: dict[str, int]) -> bool:
        """Each named member owns that many partitions, together all six."""
        now = self.assignment()
        owned = sorted(p for name in sizes for p in now.get(name, []))
        return owned == ALL and all(len(now.get(n, [])) == k for n, k in sizes.items())

    def sample(self, label: str) -> list[int]:
        from confluent_kafka import TopicPartition

        started = time.monotonic()
        got = self.observer.committed([TopicPartition(self.topic, p) for p in ALL], timeout=10)
        assert all(tp.error is None for tp in got), got
        offsets = [tp.offset for tp in sorted(got, key=lambda tp: tp.partition)]
        self.samples.append((started, label, offsets))
        self.last_sample = time.monotonic()
        return offsets

    def wait(self, what: str, until, seconds: float = 30) -> None:
        """Until `until()`, sampling the committed offsets meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for worker in [self.feed, *self.members.values()]:
                worker.check()
            if time.monotonic() - self.last_sample >= SAMPLE_EVERY:
                self.sample(f"during: {what}")
            if until():
                self.sample(what)
                return
            time.sleep(0.02)
        raise AssertionError(
            f"{what}: not within {seconds}s (assignment {self.assignment()}, "
            f"produced {self.feed.produced}, processed "
            f"{ {n: len(m.log.processed) for n, m in self.members.items()} }, "
            f"committed {self.samples[-1:]})"
        )

    def acked_after(self, name: str, t: float) -> bool:
        return any(at > t for at, _ in self.members[name].log.commits)

    def close(self) -> None:
        """Cleanup after a failure too: failures here were reported by `check()` already."""
        if self.child is not None:
            self.child.kill()
        workers = [self.feed, *self.members.values()]
        for worker in workers:
            worker.stopping = True
        for worker in workers:
            with contextlib.suppress(Exception):
                worker.stop()
        self.observer.close()


def run_scenario(s: Scenario) -> tuple[Log, list[tuple[int, int]], float]:
    """A; A+B; A again (B left); A+C; C killed holding an uncommitted batch; A drains."""
    s.feed.more()
    a = s.join("A")
    s.wait("A alone", lambda: s.settled({"A": 6}) and bool(a.log.commits))

    s.feed.more()  # produced while B joins ...
    b = s.join("B")
    s.wait("B joined", lambda: s.settled({"A": 3, "B": 3}))
    s.feed.more()  # ... and while B owns partitions: B processes and commits some
    joined = time.monotonic()
    s.wait("B committed", lambda: s.acked_after("B", joined))

    s.feed.more()
    b.stop()  # close(): B leaves the group
    left = time.monotonic()
    s.wait("B left", lambda: s.settled({"A": 6}))
    s.feed.more()
    s.wait("A after B left", lambda: s.acked_after("A", left))

    s.feed.more()
    s.child = child = Child(s.kafka, s.group, s.strategy, s.topic)
    s.wait("C joined", lambda: s.settled({"A": 3, "C": 3}))
    s.feed.more()
    s.wait("C holds an uncommitted batch", lambda: child.hold() is not None)
    hold = child.hold()
    assert hold is not None
    child.kill()
    c_log, held = child.log()
    s.wait("C killed: its session expired", lambda: s.settled({"A": 6}))

    s.feed.allow(TOTAL)

    def drained() -> bool:
        if s.feed.produced < TOTAL:
            return False
        seen = {v for log in [a.log, b.log, c_log] for _, _, _, v in log.processed}
        return len(seen) == TOTAL and min(s.sample("drain")) >= TOTAL // PARTITIONS

    s.wait("A drained everything", drained)
    a.stop()
    return c_log, held, hold["t"]


def check_committed(s: Scenario, logs: list[Log]) -> None:
    """(2) OffsetFetch never goes backwards, includes every earlier acknowledged commit,
    and ends at the log end offsets."""
    from confluent_kafka import TopicPartition

    acked = [
        (t, p, o, log.name) for log in logs for t, offs in log.commits for p, o in offs.items()
    ]
    for (_, label_a, before), (t, label_b, after) in zip(s.samples, s.samples[1:], strict=False):
        went_back = [p for p in ALL if after[p] < before[p]]
        assert not went_back, (
            f"committed went backwards ({label_a} -> {label_b}): {before} -> {after}"
        )
        missing = [c for c in acked if c[0] < t and after[c[1]] < c[2]]
        assert not missing, f"acknowledged commits not in the OffsetFetch at {label_b}: {missing}"
    ends = []
    for p in ALL:
        _, high = s.observer.get_watermark_offsets(TopicPartition(s.topic, p), timeout=10)
        ends.append(high)
    assert sum(ends) == TOTAL
    assert s.sample("end") == ends


def check_redelivery(logs: list[Log]) -> Counter[str]:
    """(3) Nothing is processed after an acknowledged commit covered it. Returns who
    processed each duplicate the second (or later) time."""
    commits: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for log in logs:
        for t, offs in log.commits:
            for p, o in offs.items():
                commits[p].append((t, o))
    times, covered = {}, {}
    for p, cs in commits.items():
        cs.sort()
        times[p] = [t for t, _ in cs]
        covered[p] = [max(o for _, o in cs[: i + 1]) for i in range(len(cs))]
    events = sorted((t, p, o, v, log.name) for log in logs for t, p, o, v in log.processed)
    values: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int]] = set()
    duplicates: Counter[str] = Counter()
    for t, p, o, v, who in events:
        assert values.setdefault((p, o), v) == v, f"offset {p}/{o} read as two values"
        i = bisect.bisect_left(times.get(p, []), t)
        floor = covered[p][i - 1] if i else 0
        assert o >= floor, f"{who} processed {p}/{o} after a commit of {floor} was acknowledged"
        if (p, o) in seen:
            duplicates[who] += 1
        seen.add((p, o))
    return duplicates


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_at_least_once_across_rebalances(kafka, strategy):
    s = Scenario(kafka, strategy)
    try:
        c_log, held, held_at = run_scenario(s)
        logs = [s.members["A"].log, s.members["B"].log, c_log]
        check_committed(s, logs)  # while the observer is open
    finally:
        s.close()

    # (1) Every record processed at least once; C's batch, processed but never committed
    # before SIGKILL, is processed again by the survivor.
    values = Counter(v for log in logs for _, _, _, v in log.processed)
    assert sorted(values) == list(range(TOTAL)), (
        f"never processed: {set(range(TOTAL)) - set(values)}"
    )
    assert held and all(log.processed for log in logs)
    redone = {(p, o) for t, p, o, _ in s.members["A"].log.processed if t > held_at}
    assert set(held) <= redone, f"C's uncommitted batch not redelivered: {set(held) - redone}"

    # (3) Besides the timeline check, the bound: every duplicate is a record processed in a
    # batch whose commit was never acknowledged (C's held batch, or a failed commit).
    duplicates = check_redelivery(logs)
    times = Counter((p, o) for log in logs for _, p, o, _ in log.processed)
    repeated = {key for key, n in times.items() if n > 1}
    uncommitted = {key for log in logs for key in log.uncommitted}
    assert repeated <= uncommitted, f"committed records redelivered: {repeated - uncommitted}"
    assert sum(duplicates.values()) == sum(values.values()) - TOTAL >= len(held)
    failures = {log.name: log.failures for log in logs if log.failures}
    print(
        f"{strategy}: processed {sum(values.values())} for {TOTAL} records, "
        f"duplicates {dict(duplicates)} (C held {len(held)}, processed but uncommitted "
        f"{len(uncommitted)}), {len(s.samples)} offset fetches, failures {failures}"
    )
