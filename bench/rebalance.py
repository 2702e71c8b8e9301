"""Rebalance benchmark: ``python -m bench.rebalance [--quick]`` (``make bench-rebalance``).

Issue 22's "Speed" comparison of the classic group protocol (cooperative-sticky) and the
KIP-848 consumer protocol (``group.protocol=consumer``), same run, same machine. For each
protocol: a broker of its own (pinned to CPU 1, its own throwaway Postgres database), a
topic of ``--partitions`` (900) partitions that a producer process keeps feeding
round-robin at ``--rate`` records/s, so that every partition keeps receiving records, and
``--members`` (10) confluent-kafka consumers in one group, each in its own process on
CPU 0. Once the group has settled, three events, each after the group settled again:

* ``rebalance_join``: one more member subscribes (time from its subscribe());
* ``rebalance_leave``: a member closes its consumer (a clean LeaveGroup);
* ``rebalance_kill9``: a member is SIGKILLed (the group learns only by its session ending).

Per event: ``assigned_s``, seconds until the live members hold every partition exactly
once in balanced shares; ``fetching_s``, until each partition's holder has received a
record from it after the event; ``done_s``, the larger. For the partitions a surviving
member held both before and after (``kept_partitions``): ``kept_max_gap_s``, the longest
time between two consecutive fetches of one of them across the event (from the last
fetch before it to the first after ``done_s``), beside ``quiet_max_gap_s``, the same over
an equally long quiet window just before the event. A last line gives classic / consumer
``done_s`` per event (target: at least 5 on join and leave).

Classic members use heartbeat.interval.ms 500 and session.timeout.ms 6000, as
:mod:`bench.groups`; consumer-protocol members set none of these (the broker does: the
broker of that run gets ``MILLRACE_GROUP_PROTOCOLS=classic,consumer`` and the same 500 ms /
6000 ms as ``MILLRACE_GROUP_CONSUMER_*``). A broker that refuses the consumer protocol
fails that run with the error the members got from it, and the command exits 1.

Members report assignment changes and, after each consume() call that returned records,
which partitions they came from, with wall-clock times; times are good to about 20 ms.
Every wait is bounded by ``--timeout``; member and producer processes live at most
:data:`bench.members.MEMBER_LIFETIME_S` and are killed at the end whatever happens.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import itertools
import multiprocessing
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import bench_broker, bench_env, emit, metadata_database, run_step
from bench.members import MEMBER_LIFETIME_S, Group, Member, group

SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 500
RECORD_BYTES = 100
EVENTS = ("join", "leave", "kill9")
PROTOCOLS = ("classic", "consumer")
CONSUMER_PROTOCOL_ENV = {
    "MILLRACE_GROUP_PROTOCOLS": "classic,consumer",
    "MILLRACE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_INTERVAL_MS),
    "MILLRACE_GROUP_CONSUMER_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
}


CONSUMER_GROUP_HEARTBEAT = 68  # the API key KIP-848 members need


class GroupFailed(RuntimeError):
    """The group never got where it should, or a member got a fatal error from the broker."""


def advertised_api_keys(port: int, timeout: float = 10) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions v0 answer: {api key: (min version, max version)}.

    Asked over a raw socket because librdkafka, when the broker lacks an API a
    ``group.protocol=consumer`` member needs, says nothing and waits.
    """
    client_id = b"bench-rebalance"
    request = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise GroupFailed("the broker closed the connection during ApiVersions")
            data += chunk
    _correlation, error, count = struct.unpack_from(">ihi", data, 4)
    if error:
        raise GroupFailed(f"ApiVersions v0 answered error code {error}")
    ranges = [struct.unpack_from(">hhh", data, 14 + 6 * i) for i in range(count)]
    return {key: (low, high) for key, low, high in ranges}


def require_consumer_protocol(port: int) -> None:
    """Fail at once, with the broker's answer, if it cannot take consumer-protocol members."""
    keys = advertised_api_keys(port)
    if CONSUMER_GROUP_HEARTBEAT not in keys:
        raise GroupFailed(
            "the broker refuses group.protocol=consumer: its ApiVersions answer has no"
            f" ConsumerGroupHeartbeat (API key {CONSUMER_GROUP_HEARTBEAT}); it lists keys"
            f" {sorted(keys)}. Started with {CONSUMER_PROTOCOL_ENV}."
        )


# --- child processes ------------------------------------------------------------------------


def fetching_member(conf: dict[str, Any], topic: str, conn: Connection) -> None:
    """A member that consumes: besides :func:`bench.members.assignment_member`'s reports,
    ``("fetched", t, partitions)`` after every consume() that returned records, and
    ``("error", t, (text, fatal))`` for every error librdkafka reports."""
    from confluent_kafka import Consumer, KafkaException

    def on_error(err: Any) -> None:
        conn.send(("error", time.time(), (str(err), bool(err.fatal()))))

    consumer = Consumer(conf | {"error_cb": on_error})
    try:
        conn.send(("subscribe", time.time(), []))
        consumer.subscribe([topic])
        last: list[int] | None = None
        deadline = time.monotonic() + MEMBER_LIFETIME_S
        while time.monotonic() < deadline and not conn.poll():
            try:
                records = consumer.consume(1000, 0.02)
            except KafkaException as exc:
                conn.send(("error", time.time(), (str(exc.args[0]), True)))
                break
            at = time.time()
            got: set[int] = set()
            for record in records:
                if record.error():
                    conn.send(("error", at, (str(record.error()), False)))
                elif (partition := record.partition()) is not None:
                    got.add(partition)
            if got:
                conn.send(("fetched", at, sorted(got)))
            now = sorted(tp.partition for tp in consumer.assignment())
            if now != last:
                conn.send(("assigned", time.time(), now))
                last = now
    finally:
        consumer.close()
        conn.close()


def feed(conf: dict[str, Any], topic: str, partitions: int, rate: int, conn: Connection) -> None:
    """The producer: ``rate`` records/s round-robin over every partition until told to
    stop (or MEMBER_LIFETIME_S); answers ``(sent, delivered, errors)`` on the way out."""
    from confluent_kafka import Producer

    counts = {"delivered": 0, "errors": 0}

    def done(err: Any, _msg: Any) -> None:
        counts["errors" if err else "delivered"] += 1

    producer = Producer(conf | {"linger.ms": 20, "acks": 1})
    payload = b"x" * RECORD_BYTES
    sent = 0
    start = time.monotonic()
    try:
        while not conn.poll() and time.monotonic() - start < MEMBER_LIFETIME_S:
            # A late producer skips what it missed: no bursts after a stall.
            due = int((time.monotonic() - start) * rate)
            sent = max(sent, due - rate // 10)
            while sent < due:
                try:
                    producer.produce(topic, payload, partition=sent % partitions, on_delivery=done)
                except BufferError:
                    break
                sent += 1
            producer.poll(0.01)
        producer.flush(30)
    finally:
        conn.send((sent, counts["delivered"], counts["errors"]))
        conn.close()


@contextlib.contextmanager
def producing(
    conf: dict[str, Any], topic: str, partitions: int, rate: int
) -> Iterator[dict[str, int]]:
    """The producer process for the block; its counts are filled in when the block ends."""
    mp = multiprocessing.get_context("spawn")
    ours, theirs = mp.Pipe()
    process = mp.Process(target=feed, args=(conf, topic, partitions, rate, theirs), daemon=True)
    process.start()
    theirs.close()
    counts: dict[str, int] = {}
    try:
        yield counts
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        if ours.poll(40):
            with contextlib.suppress(EOFError, OSError):
                sent, delivered, errors = ours.recv()
                counts |= {"sent": sent, "delivered": delivered, "errors": errors}
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)
        ours.close()


# --- the parent's view of a member --------------------------------------------------------


@dataclass(eq=False)
class FetchingMember(Member):
    fetched: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    fatal: bool = False

    def take(self, kind: str, at: float, payload: Any) -> None:
        if kind == "fetched":
            for partition in payload:
                self.fetched[partition].append(at)
        elif kind == "error":
            text, fatal = payload
            self.errors.append(text)
            self.fatal = self.fatal or fatal
        else:
            super().take(kind, at, payload)

    def first_fetch_after(self, partition: int, t: float) -> float | None:
        times = self.fetched.get(partition, [])
        i = bisect.bisect_right(times, t)
        return times[i] if i < len(times) else None


def owners(members: list[FetchingMember]) -> dict[int, FetchingMember]:
    return {p: m for m in members for p in m.assignment or []}


def balanced(members: list[FetchingMember], partitions: int) -> bool:
    """Every partition held exactly once, shares differing by at most one."""
    held = [m.assignment for m in members]
    if any(a is None for a in held):
        return False
    sizes = {len(a or []) for a in held}
    small = partitions // len(members)
    return sizes <= {small, -(-partitions // len(members))} and sorted(
        p for a in held for p in a or []
    ) == list(range(partitions))


def wait_rebalanced(
    grp: Group, live: list[FetchingMember], since: float
) -> tuple[float, float] | None:
    """Wait until ``live`` are balanced and every partition's holder fetched it after
    ``since``; (assigned at, fetching at), or None if ``grp.timeout`` passes first."""
    found: dict[int, float] = {}

    def done() -> bool:
        for m in grp.members:
            if isinstance(m, FetchingMember) and m.fatal:
                raise GroupFailed("; ".join(dict.fromkeys(m.errors)))
        if not balanced(live, grp.partitions):
            found.clear()
            return False
        for p, m in owners(live).items():
            if p not in found and (at := m.first_fetch_after(p, since)) is not None:
                found[p] = at
        return len(found) == grp.partitions

    if not grp.wait_for(done):
        return None
    return max([since, *(m.assigned_at for m in live)]), max(found.values())


def longest_gap(
    kept: dict[int, FetchingMember], start: float, end: float, *, across: bool
) -> float | None:
    """The longest time between consecutive fetches of a kept partition.

    ``across``: from its last fetch at or before ``start`` to its first at or after
    ``end`` (a gap that spans the event counts whole). Else only inside the window: its
    edges count as fetches, so a gap running into it from before counts from ``start``.
    """
    longest: float | None = None
    for p, m in kept.items():
        times = m.fetched.get(p, [])
        if across:
            lo = max(0, bisect.bisect_right(times, start) - 1)
            span = times[lo : bisect.bisect_left(times, end) + 1]
        else:
            span = times[bisect.bisect_right(times, start) : bisect.bisect_left(times, end)]
        span = [start, *span] if not span or span[0] > start else span
        span = [*span, end] if span[-1] < end else span
        gap = max(b - a for a, b in itertools.pairwise(span))
        longest = gap if longest is None else max(longest, gap)
    return longest


def stuck(grp: Group, live: list[FetchingMember], since: float) -> str:
    """Where ``live`` stand when a wait for them ran out: the failure's message."""
    held = owners(live)
    unfetched = [p for p, m in held.items() if m.first_fetch_after(p, since) is None]
    errors = sorted({e for m in grp.members for e in getattr(m, "errors", [])})
    return (
        f"not rebalanced within {grp.timeout} s: shares"
        f" {[len(m.assignment or []) for m in live]} of {len(live)} live members,"
        f" {grp.partitions - len(held)} partitions unassigned,"
        f" {len(unfetched)} assigned but not fetched since"
        + (f"; errors from the broker: {'; '.join(errors)}" if errors else "")
    )


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


@dataclass
class Event:
    name: str
    at: float
    before: dict[int, FetchingMember]
    survivors: list[FetchingMember]  # members of before the event still there after it
    expected: list[FetchingMember]  # the members that should share the partitions after it
    broker_cpu_at: float  # the broker's CPU seconds at the event


def measure(
    grp: Group, event: Event, settle: float, quiet_from: float, broker_cpu: Callable[[], float]
) -> dict[str, Any]:
    """Wait for the group to rebalance after ``event``, let it settle, and figure it."""
    reached = wait_rebalanced(grp, event.expected, event.at)
    if reached is None:
        raise GroupFailed(f"{event.name}: {stuck(grp, event.expected, event.at)}")
    # Near 1: the broker's one core was saturated during the rebalance.
    cpu_share = (broker_cpu() - event.broker_cpu_at) / max(1e-3, time.time() - event.at)
    assigned, fetching = reached
    done = max(assigned, fetching)
    after = owners(event.expected)
    grp.settle(settle)  # fetches after done_s close the gaps being measured
    survivors = {id(m) for m in event.survivors if m.open}
    kept = {p: m for p, m in event.before.items() if id(m) in survivors and after.get(p) is m}
    span = done - event.at
    quiet_start = max(quiet_from, event.at - span)
    return {
        "members_after": len(event.expected),
        "assigned_s": _round(assigned - event.at),
        "fetching_s": _round(fetching - event.at),
        "done_s": _round(span),
        "moved_partitions": sum(
            1 for p in range(grp.partitions) if event.before.get(p) is not after[p]
        ),
        "kept_partitions": len(kept),
        "kept_max_gap_s": _round(longest_gap(kept, event.at, done, across=True)),
        "quiet_max_gap_s": _round(longest_gap(kept, quiet_start, event.at, across=False)),
        "quiet_window_s": _round(event.at - quiet_start),
        "shares_after": sorted(len(m.assignment or []) for m in event.expected),
        "broker_cpu_share": round(cpu_share, 2),
        "member_errors": sorted({e for m in grp.members for e in getattr(m, "errors", [])}),
    }


def has_subscribed(member: Member) -> bool:
    return member.subscribed_at is not None


def live_members(grp: Group) -> list[FetchingMember]:
    return [m for m in grp.members if isinstance(m, FetchingMember) and m.open]


def run_events(
    grp: Group, members: int, settle: float, broker_cpu: Callable[[], float]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Start ``members``, let them settle, then join, leave and kill -9 one at a time."""
    started = [grp.start() for _ in range(members)]
    first = time.time()
    reached = wait_rebalanced(grp, live_members(grp), first)
    if reached is None:
        raise GroupFailed(f"{members} members starting: {stuck(grp, live_members(grp), first)}")
    initial = max(reached) - min(m.subscribed_at or first for m in started)
    grp.settle(settle)
    quiet_from = time.time() - settle
    for name in EVENTS:
        live = live_members(grp)
        before = owners(live)
        if name == "join":
            newcomer = grp.start()
            assert isinstance(newcomer, FetchingMember)
            grp.wait_for(functools.partial(has_subscribed, newcomer))
            at = newcomer.subscribed_at or time.time()
            survivors, expected = live, [*live, newcomer]
        elif name == "leave":
            at = time.time()
            live[0].conn.send("stop")  # the member closes its consumer: a clean leave
            survivors = expected = live[1:]
        else:
            at = time.time()
            live[0].process.kill()
            survivors = expected = live[1:]
        event = Event(name, at, before, survivors, expected, broker_cpu())
        figures = measure(grp, event, settle, quiet_from, broker_cpu)
        if name == "join":
            figures["initial_join_s"] = _round(initial)
        yield name, {"members_before": len(live), **figures}
        quiet_from = time.time() - settle


# Members' fetches wait up to 100 ms for data (librdkafka's defaults, 1 byte and 500 ms,
# make each of 10 members fetch again for every few records, which alone saturates the
# broker's core and slows every group request behind the fetches). The same for both
# protocols; fetch gaps are then good to about 0.1 s.
FETCH_SETTINGS = {"fetch.wait.max.ms": 100, "fetch.min.bytes": 1_000_000}


def _conf(protocol: str, endpoint: perf.Endpoint) -> dict[str, Any]:
    conf = endpoint.confluent() | {
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
        **FETCH_SETTINGS,
    }
    if protocol == "consumer":
        # The broker sets the heartbeat interval and session timeout; the assignor is its own.
        return conf | {"group.protocol": "consumer"}
    return conf | {
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "partition.assignment.strategy": "cooperative-sticky",
    }


def run_protocol(
    protocol: str, args: argparse.Namespace, work: Path
) -> list[tuple[str, dict[str, Any]]]:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    extra_protocol = CONSUMER_PROTOCOL_ENV if protocol == "consumer" else {}
    database = f"millrace_bench_rebalance_{protocol}_{os.getpid()}"
    work.mkdir(parents=True)
    with metadata_database(args.metadata, database) as database_url:
        extra = {**({"DATABASE_URL": database_url} if database_url else {}), **extra_protocol}
        settings = run_step(bench_env(work, extra), "bench.store", "settings")
        with bench_broker(work, extra, cpu="1") as (port, broker):
            os.sched_setaffinity(0, {0})  # members and producer are spawned from here
            if protocol == "consumer":
                require_consumer_protocol(port)
            endpoint = perf.Endpoint(f"127.0.0.1:{port}")
            topic = f"bench-rebalance-{uuid.uuid4().hex[:8]}"
            admin = AdminClient(endpoint.confluent())
            perf.create_topics(admin, [NewTopic(topic, args.partitions, 1)], timeout=args.timeout)
            del admin  # else its reconnect attempts fill standard error once the broker stops
            common = {
                "protocol": protocol,
                "metadata_store": "postgres" if "postgresql" in settings["engine"] else "sqlite",
                "partitions": args.partitions,
                "rate_per_s": args.rate,
                "session_timeout_ms": SESSION_TIMEOUT_MS,
                "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                **(
                    {"group_protocol": "consumer", "broker_env": extra_protocol}
                    if protocol == "consumer"
                    else {"strategy": "cooperative-sticky"}
                ),
            }
            results = []
            with (
                producing(endpoint.confluent(), topic, args.partitions, args.rate) as produced,
                group(
                    _conf(protocol, endpoint),
                    topic,
                    args.timeout,
                    args.partitions,
                    target=fetching_member,
                    member=FetchingMember,
                ) as grp,
            ):
                cpu = functools.partial(cpu_seconds, broker.pid)
                for name, figures in run_events(grp, args.members, args.settle, cpu):
                    results.append((name, common | figures))
            for name, row in results:
                emit(f"rebalance_{name}", **row, produced=produced)
            return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 partitions, 4 members")
    parser.add_argument("--protocols", help="comma-separated: classic,consumer")
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--members", type=int)
    parser.add_argument("--rate", type=int, help="records/s over all partitions")
    parser.add_argument("--settle", type=float, help="seconds left alone before each event")
    parser.add_argument("--timeout", type=float, help="bound on every wait (s)")
    parser.add_argument("--metadata", choices=["auto", "postgres", "sqlite"], default="auto")
    parser.add_argument("--keep", action="store_true", help="keep the brokers' logs and data")
    args = parser.parse_args(argv)
    quick = {"protocols": "classic", "partitions": 60, "members": 4, "rate": 600}
    full = {"protocols": "classic,consumer", "partitions": 900, "members": 10, "rate": 2000}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.settle = args.settle or (4.0 if args.quick else 10.0)
    args.timeout = args.timeout or (45.0 if args.quick else 90.0)
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    if unknown := set(protocols) - set(PROTOCOLS):
        parser.error(f"unknown protocols: {sorted(unknown)}")
    done: dict[str, dict[str, float]] = {}
    work = Path(tempfile.mkdtemp(prefix="millrace-rebalance-bench-"))
    try:
        for protocol in protocols:
            try:
                results = run_protocol(protocol, args, work / protocol)
            except GroupFailed as exc:
                print(
                    f"bench.rebalance: the {protocol} protocol run failed: {exc}", file=sys.stderr
                )
                return 1
            done[protocol] = {name: row["done_s"] for name, row in results}
    finally:
        if args.keep:
            print(f"bench.rebalance: brokers' logs and data kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if set(done) == set(PROTOCOLS):
        ratios = {
            f"{name}_ratio": _round(done["classic"][name] / done["consumer"][name])
            if done["consumer"][name]
            else None
            for name in EVENTS
        }
        emit(
            "rebalance_ratios",
            target_join_leave=5,
            **ratios,
            classic_done_s=done["classic"],
            consumer_done_s=done["consumer"],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
