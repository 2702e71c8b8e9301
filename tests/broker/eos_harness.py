"""Exactly once under faults (Step 13), on the fault harness of ``harness.py``.

A producer writes unique integers to a source topic (acks=all, idempotence off: the
source may hold a value twice, each copy is an input record of its own). A
consume-transform-produce job (confluent-kafka: a read_committed consumer in a group and a
transactional producer) copies every source record to the same partition of a sink topic
as ``"<source partition>:<source offset>:<attempt>"``, committing the consumed offsets in
the same transaction; an attempt is one transaction. An observer reads the sink at
read_committed while the nemesis kills, pauses, restarts and cuts off brokers: the
transaction coordinator, the group coordinator, partition leaders or any broker.

When the faults are over, the source producer stops, the job catches up and stops, and
:func:`check_exactly_once` compares the final reads of both topics with what the job was
told about each attempt:

* every source record is in the sink's read_committed view exactly once, in the source's
  order within its partition, and the group's committed offsets are the source's ends;
* nothing of an attempt the job aborted is visible to read_committed, an attempt that
  committed is visible whole, and one whose outcome the job could not learn (its commit
  failed without an answer) is visible whole or not at all;
* every record the observer read during the faults is the record at that offset in the
  final read_committed view.

The job handles errors as an application following Kafka's documented pattern would:
abortable errors abort the transaction and rewind the consumer to the committed offsets;
retriable commit errors retry the commit; fatal errors (a fenced producer, for example
after the coordinator aborted a transaction at its timeout) restart the application,
whose new producer fences the old one. librdkafka 2.16's transactional calls can outlive
their timeout for good when a coordinator moves (``send_offsets_to_transaction`` waits
for a broker state change that never comes: librdkafka issues #5456 and #5511), so
each call runs under a watchdog, as an application's would: a call still running
``HUNG_AFTER_S`` past its timeout is abandoned with its producer (kept, never destroyed,
since destroying it would block too) and the application restarts, its new producer
fencing the old.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from control_plane.catalog.models import Topic
from tests.broker.conftest import KafkaEnv, confluent_conf, kafka_python_conf
from tests.broker.harness import (
    Clock,
    Controller,
    Fault,
    Nemesis,
    Network,
    Observer,
    Report,
    Violation,
    Workload,
    high_watermarks,
    make_schedule,
    partition_rows,
    wait_healthy,
)

TXN_COORDINATOR = "txn-coordinator"
GROUP_COORDINATOR = "group-coordinator"
Output = tuple[int, int, int]  # source partition, source offset, attempt


def decode_output(raw: bytes | None) -> Output | None:
    try:
        p, o, a = (raw or b"").split(b":")
        return int(p), int(o), int(a)
    except ValueError:
        return None


# --- the job --------------------------------------------------------------------------------


@dataclass
class Attempt:
    """One transaction of the job and what the job learnt of its outcome."""

    id: int
    inputs: list[tuple[int, int]]  # (source partition, source offset) copied in it
    t_begin: float
    outcome: str = "open"  # committed | aborted | unknown (a commit that got no answer)
    error: str = ""
    t_end: float | None = None


class _Restart(Exception):
    """The application gives up its consumer and producer and starts again."""


class _Hung(_Restart):
    """A client call outlived its timeout: abandoned (see the module docstring)."""


HUNG_AFTER_S = 15.0


class ExactlyOnceJob(threading.Thread):
    """Consume-transform-produce with confluent-kafka, in transactions of up to ``batch``
    records, until stopped."""

    def __init__(
        self,
        conf: dict[str, Any],
        source: str,
        sink: str,
        clock: Clock,
        *,
        group: str | None = None,
        transactional_id: str | None = None,
        batch: int = 100,
        max_seconds: float = 3600.0,
    ) -> None:
        super().__init__(name="eos-job", daemon=True)
        self.conf = conf
        self.source = source
        self.sink = sink
        self.clock = clock
        self.group = group or f"eos-job-{uuid.uuid4().hex[:8]}"
        self.transactional_id = transactional_id or f"eos-job-{uuid.uuid4().hex[:8]}"
        self.batch = batch
        self.max_seconds = max_seconds
        self.attempts: dict[int, Attempt] = {}
        self.positions: dict[int, int] = {}  # source offsets committed by the last commit
        self.restarts: Counter[str] = Counter()
        self.abandoned: list[Any] = []  # producers whose call hung (never destroyed)
        self.errors: Counter[str] = Counter()  # every error the clients reported
        self._halt = threading.Event()
        self._common = {
            "socket.connection.setup.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3,
        }

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        while not self._halt.is_set() and time.monotonic() < deadline:
            try:
                self._session()
            except Exception as exc:  # noqa: BLE001 - _Restart, or anything a client raised
                self.restarts[_name(exc)] += 1
                self._halt.wait(0.5)

    def _session(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **self.conf,
                **self._common,
                "group.id": self.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "fetch.wait.max.ms": 100,
            }
        )
        try:
            consumer.subscribe([self.source])
            producer = self._producer()
            while not self._halt.is_set():
                records = []
                for msg in consumer.consume(self.batch, 0.2):
                    if msg.error() is None:
                        records.append(msg)
                    else:
                        self.errors[f"consume {msg.error().name()}"] += 1
                if records:
                    self._transaction(producer, consumer, records)
        finally:
            consumer.close()

    def _producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        producer = Producer(
            {
                **self.conf,
                **self._common,
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": 10_000,
                "message.timeout.ms": 10_000,
                "request.timeout.ms": 4000,
                "linger.ms": 5,
                "retry.backoff.ms": 100,
                "retry.backoff.max.ms": 1000,
            }
        )
        while not self._halt.is_set():
            try:
                self._call(producer, producer.init_transactions, 30)
                return producer
            except KafkaException as exc:
                err = exc.args[0]
                self.errors[f"init {err.name()}"] += 1
                if not err.retriable():
                    raise _Restart(f"init {err.name()}") from exc
        raise _Restart("stopped")

    def _transaction(self, producer: Any, consumer: Any, records: list[Any]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        attempt = Attempt(
            len(self.attempts) + 1,
            [(m.partition(), m.offset()) for m in records],
            self.clock.now(),
        )
        self.attempts[attempt.id] = attempt
        ends: dict[int, int] = {}
        for p, o in attempt.inputs:
            ends[p] = max(ends.get(p, 0), o + 1)
        try:
            producer.begin_transaction()
            for msg in records:
                p, o = msg.partition(), msg.offset()
                value = b"%d:%d:%d" % (p, o, attempt.id)
                producer.produce(self.sink, value=value, key=msg.key(), partition=p)
            offsets = [TopicPartition(self.source, p, o) for p, o in sorted(ends.items())]
            metadata = consumer.consumer_group_metadata()
            self._call(producer, producer.send_offsets_to_transaction, offsets, metadata, 30)
        except KafkaException as exc:
            # Not committed: no commit was asked for, so the coordinator aborts it (now,
            # at its timeout, or when the next producer fences this one).
            self._abort(producer, consumer, attempt, f"before commit: {exc.args[0].name()}")
            return
        except BufferError as exc:
            self._abort(producer, consumer, attempt, f"before commit: {exc}")
            return
        except _Hung as exc:  # never committed: the next producer fences and aborts it
            self._finish(attempt, "aborted", str(exc))
            raise
        while True:
            try:
                self._call(producer, producer.commit_transaction, 30)
            except _Hung as exc:
                self._finish(attempt, "unknown", str(exc))
                raise
            except KafkaException as exc:
                err = exc.args[0]
                self.errors[f"commit {err.name()}"] += 1
                if err.retriable() and not self._halt.is_set():
                    continue
                if err.txn_requires_abort():
                    self._abort(producer, consumer, attempt, f"commit: {err.name()}")
                    return
                self._finish(attempt, "unknown", f"commit: {err.name()}")
                raise _Restart(f"commit {err.name()}") from exc
            self._finish(attempt, "committed")
            self.positions.update(ends)
            return

    def _abort(self, producer: Any, consumer: Any, attempt: Attempt, why: str) -> None:
        from confluent_kafka import KafkaException

        self.errors[why] += 1
        try:
            self._call(producer, producer.abort_transaction, 30)
        except _Hung as exc:  # not committed either way
            self._finish(attempt, "aborted", f"{why}; {exc}")
            raise
        except KafkaException as exc:
            # A fatal error (fenced): the transaction is not committed either way.
            self._finish(attempt, "aborted", f"{why}; abort: {exc.args[0].name()}")
            raise _Restart(f"abort {exc.args[0].name()}") from exc
        self._finish(attempt, "aborted", why)
        self._rewind(consumer)

    def _call(self, producer: Any, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` (its last argument a timeout in seconds) under the watchdog."""
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                outcome["error"] = exc

        worker = threading.Thread(target=run, name="eos-job-call", daemon=True)
        worker.start()
        worker.join(args[-1] + HUNG_AFTER_S)
        if worker.is_alive():
            self.abandoned.append(producer)
            raise _Hung(f"hung {fn.__name__}")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def _rewind(self, consumer: Any) -> None:
        """Back to the group's committed offsets, which the aborted transaction did not
        move (a new consumer would start there too)."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException

        try:
            for tp in consumer.committed(consumer.assignment(), timeout=10):
                tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(tp)
        except KafkaException as exc:
            raise _Restart(f"rewind {exc.args[0].name()}") from exc

    def _finish(self, attempt: Attempt, outcome: str, error: str = "") -> None:
        attempt.outcome, attempt.error, attempt.t_end = outcome, error, self.clock.now()


def _name(exc: Exception) -> str:
    if isinstance(exc, _Restart):
        return str(exc)
    arg = exc.args[0] if exc.args else None
    return arg.name() if hasattr(arg, "name") else type(exc).__name__


# --- reading and checking -------------------------------------------------------------------


def read_partitions(
    conf: dict[str, Any],
    topic: str,
    partitions: int,
    isolation: str,
    decode: Callable[[bytes | None], Any] = decode_output,
    seconds: float = 120.0,
) -> dict[int, list[tuple[int, Any]]]:
    """Every record a consumer at ``isolation`` reads from offset 0 to the end of each
    partition (the end-of-partition event at or past the high watermark taken first)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": f"eos-final-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "auto.offset.reset": "error",
            "log_level": 3,
        }
    )
    deadline = time.monotonic() + seconds
    try:
        ends = high_watermarks(consumer, topic, partitions, deadline)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[tuple[int, Any]]] = {p: [] for p in range(partitions)}
        done: set[int] = set()
        errors: Counter[str] = Counter()
        while len(done) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= ends[msg.partition()]:
                        done.add(msg.partition())
                else:
                    errors[msg.error().name()] += 1
                continue
            got[msg.partition()].append((msg.offset(), decode(msg.value())))
        if len(done) < partitions:
            raise AssertionError(
                f"{topic} at {isolation}: no end of partition {sorted(set(ends) - done)} "
                f"within {seconds} s (high watermarks {ends}, errors {dict(errors)})"
            )
        return got
    finally:
        consumer.close()


def committed_offsets(conf: dict[str, Any], group: str, topic: str, partitions: int) -> dict:
    """The group's committed offsets as a fresh client (not the job) fetches them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "log_level": 3})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def check_exactly_once(
    source: dict[int, list[tuple[int, Any]]],
    sink: dict[int, list[tuple[int, Output | None]]],
    sink_uncommitted: dict[int, list[tuple[int, Output | None]]],
    attempts: dict[int, Attempt],
    committed: dict[int, int],
    seen: list[tuple[int, int, Output | None, float]],
) -> Report:
    """The exactly-once checks listed in the module docstring."""
    violations: list[Violation] = []
    inputs = {(p, o) for p, records in source.items() for o, _ in records}
    copies: Counter[tuple[int, int]] = Counter()
    visible: Counter[int] = Counter()  # attempt -> its records visible at read_committed
    at: dict[tuple[int, int], Output | None] = {}
    for p, records in sink.items():
        last = -1
        for offset, out in records:
            at[p, offset] = out
            if out is None or out[0] != p or (p, out[1]) not in inputs:
                violations.append(
                    Violation("a sink record that copies no source record", p, None, f"{offset}")
                )
                continue
            _, source_offset, attempt_id = out
            copies[p, source_offset] += 1
            visible[attempt_id] += 1
            if source_offset <= last:
                violations.append(
                    Violation(
                        "out of source order in the sink",
                        p,
                        source_offset,
                        f"sink offset {offset} copies {p}@{source_offset} after {p}@{last}",
                    )
                )
            last = max(last, source_offset)
    for (p, o), n in sorted(copies.items()):
        if n > 1:
            violations.append(Violation(f"duplicated: copied {n} times", p, o, f"source {p}@{o}"))
    missing = sorted(inputs - set(copies))
    for p, o in missing[:50]:
        violations.append(Violation("lost: a source record not in the sink", p, o, f"{p}@{o}"))
    ends = {p: (records[-1][0] + 1 if records else 0) for p, records in source.items()}
    for p, end in sorted(ends.items()):
        if committed.get(p, -1) != end:
            violations.append(
                Violation(
                    "the group's committed offset is not the end of the source",
                    p,
                    None,
                    f"committed {committed.get(p)}, source ends at {end}",
                )
            )
    outcomes: Counter[str] = Counter(a.outcome for a in attempts.values())
    for attempt_id, n in sorted(visible.items()):
        attempt = attempts.get(attempt_id)
        if attempt is None:
            violations.append(Violation(f"records of attempt {attempt_id}, never made", -1))
        elif attempt.outcome == "aborted":
            violations.append(
                Violation(
                    f"aborted output visible to read_committed ({attempt.error})",
                    attempt.inputs[0][0],
                    attempt_id,
                    f"{n} of {len(attempt.inputs)} records",
                    attempt.t_begin,
                    attempt.t_end or attempt.t_begin,
                )
            )
    for attempt in attempts.values():
        n = visible.get(attempt.id, 0)
        whole = n == len(attempt.inputs)
        if (attempt.outcome == "committed" and not whole) or (
            attempt.outcome in ("unknown", "open") and n and not whole
        ):
            violations.append(
                Violation(
                    f"a {attempt.outcome} transaction is partly visible",
                    attempt.inputs[0][0],
                    attempt.id,
                    f"{n} of {len(attempt.inputs)} records",
                    attempt.t_begin,
                    attempt.t_end or attempt.t_begin,
                )
            )
    mismatched = 0
    for p, offset, out, t in seen:
        if at.get((p, offset), "nothing") != out:
            mismatched += 1
            if mismatched <= 50:
                violations.append(
                    Violation(
                        "read at read_committed during the faults, not in the final view",
                        p,
                        None,
                        f"read {out} at {p}@{offset} (t={t:.2f}); "
                        f"finally {at.get((p, offset), 'nothing')}",
                        max(0.0, t - 10),
                        t,
                    )
                )
    aborted = {a.id for a in attempts.values() if a.outcome == "aborted"}
    summary = {
        "source_records": len(inputs),
        "sink_committed_records": sum(len(r) for r in sink.values()),
        "sink_records_read_uncommitted": sum(len(r) for r in sink_uncommitted.values()),
        "aborted_records_in_log": sum(
            1 for r in sink_uncommitted.values() for _, out in r if out and out[2] in aborted
        ),
        "transactions": dict(outcomes),
        "duplicated": sum(1 for n in copies.values() if n > 1),
        "lost": len(missing),
        "observed_reads": len(seen),
        "mismatched_reads": mismatched,
        "violations": len(violations),
    }
    return Report(summary, violations)


# --- the run ----------------------------------------------------------------------------------


def eos_schedule(seed: int, count: int, brokers: int, partitions: int, **kw: Any) -> list[Fault]:
    """:func:`make_schedule`'s faults, a third of them aimed at the transaction
    coordinator and a sixth at the group coordinator; the first fault kills the
    transaction coordinator (kill -9)."""
    faults = make_schedule(seed, count, brokers, partitions, **kw)
    for fault in faults:
        if fault.index % 6 in (0, 3):
            fault.target = (TXN_COORDINATOR, 0)
        elif fault.index % 6 == 4:
            fault.target = (GROUP_COORDINATOR, 0)
    first = faults[0]
    if first.kind != "kill9":
        first.kind, first.mode = "kill9", ""
        first.seconds = first.seconds or 2.0
    return faults


class CoordinatorNemesis(Nemesis):
    """Also aims at the job's coordinators, as the cluster names them at fault time
    (DescribeTransactions through kafka-python, DescribeGroups through confluent-kafka)."""

    def __init__(self, *args: Any, job: ExactlyOnceJob, env: KafkaEnv) -> None:
        super().__init__(*args)
        self.job = job
        self.client_env = env
        self.unresolved = 0

    def resolve(self, fault: Fault) -> int:
        kind, _ = fault.target
        try:
            if kind == TXN_COORDINATOR:
                return self._txn_coordinator()
            if kind == GROUP_COORDINATOR:
                return self._group_coordinator()
        except Exception:  # noqa: BLE001 - not known yet, or the cluster is busy: any broker
            self.unresolved += 1
            return self.cluster[fault.index % len(self.cluster)].broker_id
        return super().resolve(fault)

    def _txn_coordinator(self) -> int:
        from kafka.admin import KafkaAdminClient

        env = self.client_env
        quiet = logging.getLogger("kafka")
        level, quiet.level = quiet.level, logging.WARNING  # its INFO lines would drown ours
        try:
            admin = KafkaAdminClient(**kafka_python_conf(env, env.admin_a), request_timeout_ms=5000)
            try:
                found = admin.describe_transactions([self.job.transactional_id])
                return int(found[self.job.transactional_id].coordinator_id)
            finally:
                admin.close()
        finally:
            quiet.level = level

    def _group_coordinator(self) -> int:
        from confluent_kafka.admin import AdminClient

        env = self.client_env
        admin = AdminClient(confluent_conf(env, env.admin_a))
        future = admin.describe_consumer_groups([self.job.group], request_timeout=5)
        return int(future[self.job.group].result(10).coordinator.id)


def run_exactly_once(
    cluster: list[KafkaEnv],
    network: Network,
    source: str,
    sink: str,
    partitions: int,
    faults: list[Fault],
    *,
    seed: int,
    rate: float = 200.0,
    recover_seconds: float = 30.0,
    catch_up_seconds: float = 120.0,
    say: Callable[[str], None] = print,
) -> tuple[Report, str]:
    """The job under ``faults``, then heal, catch up, read and check. Returns the report
    and, if anything was violated, an explanation."""
    clock = Clock()
    topics = [Topic.objects.get(name=source), Topic.objects.get(name=sink)]
    conf = confluent_conf(cluster[0], cluster[0].admin_a)
    controller = Controller(clock)
    budget = 120.0 + sum(f.seconds + f.gap + recover_seconds + 30 for f in faults)
    feeder = Workload(conf, source, partitions, clock, rate=rate, max_seconds=budget)
    job = ExactlyOnceJob(conf, source, sink, clock, max_seconds=budget + catch_up_seconds)
    observer = Observer(
        {**conf, "isolation.level": "read_committed"}, sink, partitions, clock, decode_output
    )
    nemesis = CoordinatorNemesis(cluster, network, clock, topics[0], job=job, env=cluster[0])
    problems: list[str] = []
    not_recovered: list[int] = []

    def healthy(seconds: float) -> bool:
        return all(wait_healthy(t, seconds) for t in topics)

    controller.start()
    try:
        if not healthy(60):
            raise AssertionError(f"topics never healthy: {[partition_rows(t) for t in topics]}")
        feeder.start()
        job.start()
        observer.start()
        try:
            time.sleep(2.0)
            try:
                for fault in faults:
                    problems += nemesis.restart_crashed(f"before fault {fault.index}")
                    time.sleep(fault.gap)
                    nemesis.run(fault)
                    if healthy(recover_seconds):
                        fault.recovered = clock.now()
                    else:
                        not_recovered.append(fault.index)
                    say(
                        f"eos t={clock.now():7.2f} {fault.describe()}: "
                        f"{fault.start:.2f}..{fault.end:.2f}, committed "
                        f"{sum(a.outcome == 'committed' for a in job.attempts.values())} "
                        f"of {len(job.attempts)} transactions"
                    )
                problems += nemesis.restart_crashed("after the last fault")
            finally:
                nemesis.heal_all()
            if not healthy(120):
                problems.append("not healthy 120 s after healing")
            feeder.stop()
            feeder.join(feeder.flush_seconds + 30)
            source_now = read_partitions(conf, source, partitions, "read_uncommitted", _ignore)
            ends = {p: (r[-1][0] + 1 if r else 0) for p, r in source_now.items()}
            deadline = time.monotonic() + catch_up_seconds
            while time.monotonic() < deadline and any(
                job.positions.get(p, 0) < end for p, end in ends.items()
            ):
                time.sleep(0.5)
        finally:
            feeder.stop()
            job.stop()
            observer.stop()
            job.join(120)
            observer.join(30)
        if job.is_alive():
            problems.append("the job did not stop")
        source_all = read_partitions(conf, source, partitions, "read_uncommitted", _ignore)
        sink_committed = read_partitions(conf, sink, partitions, "read_committed")
        sink_all = read_partitions(conf, sink, partitions, "read_uncommitted")
        committed = committed_offsets(conf, job.group, source, partitions)
    finally:
        controller.stop()
    report = check_exactly_once(
        source_all, sink_committed, sink_all, job.attempts, committed, observer.seen
    )
    report.summary = {
        "seed": seed,
        "faults": len(faults),
        "faults_by_kind": dict(Counter(f.kind for f in faults)),
        "faults_by_target": dict(Counter(f.target[0] for f in faults)),
        "cuts_by_mode": dict(Counter(f.mode for f in faults if f.kind == "cut")),
        **report.summary,
        "job_restarts": dict(job.restarts),
        "hung_client_calls": len(job.abandoned),
        "job_errors": dict(job.errors),
        "observer_errors": dict(observer.errors),
        "controller_changes": len(controller.changes),
        "targets_unresolved": nemesis.unresolved,
        "not_recovered": not_recovered,
        "duration_s": round(clock.now(), 1),
    }
    for problem in problems + nemesis.problems:
        report.violations.append(Violation(problem, -1))
    report.summary["violations"] = len(report.violations)
    text = ""
    if report.violations:
        text = explain_eos(report, faults, job, seed)
    return report, text


def _ignore(raw: bytes | None) -> None:
    return None


def explain_eos(report: Report, faults: list[Fault], job: ExactlyOnceJob, seed: int) -> str:
    lines = [
        f"{len(report.violations)} violation(s); reproduce with CHAOS_SEED={seed} "
        f"CHAOS_FAULTS={len(faults)}",
        f"summary: {report.summary}",
    ]
    for v in report.violations[:10]:
        lines.append(f"\n* {v.what}: partition {v.partition}, {v.value}: {v.offsets}")
        lo, hi = v.t_from - 10, v.t_to + 10
        for f in faults:
            if f.start is not None and f.start <= hi and (f.end or hi) >= lo:
                lines.append(f"  {f.describe()}: t {f.start:.2f}..{f.end}")
        for a in job.attempts.values():
            if a.t_begin <= hi and (a.t_end or hi) >= lo and a.outcome != "committed":
                lines.append(f"  attempt {a.id}: {a.outcome} {a.error} t {a.t_begin:.2f}")
    if len(report.violations) > 10:
        lines.append(f"\n... and {len(report.violations) - 10} more")
    return "\n".join(lines)
