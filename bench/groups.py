"""Group benchmark: ``python -m bench.groups [--quick]`` (``make bench-groups``).

Starts one broker (development listener, tenant quotas raised, production defaults for
the group settings) pinned to CPU 1 and drives it from CPU 0 with confluent-kafka. The
metadata store is Postgres by default, as in production: a database of its own on the
server of ``DATABASE_URL`` (or 127.0.0.1:5432 as ``postgres``), dropped at the end;
``--metadata sqlite`` uses the embedded store, and ``auto`` falls back to it when no
Postgres answers. Prints one JSON line per workload:

* ``rebalance_add_fourth_member`` (and ``..._cooperative_sticky``): three members, each in
  its own process, share 12 partitions; a fourth subscribes. Seconds from its subscribe()
  until all four hold three partitions each, covering all 12.
* ``rebalance_after_kill9``: one of four members is SIGKILLed. Seconds from the kill until
  the three survivors hold all 12 partitions (target: session timeout + 1 s). The kill
  comes one second (two heartbeat intervals) after the group settles, so just after a
  heartbeat: the member's session runs its full length, the slow end of the range.
* ``offset_commit_latency``: one member of a Stable group commits synchronously at a paced
  100 commits/s; latency percentiles, beside the same number of one-transaction upserts
  issued straight to the metadata database (the raw baseline).

Members report (wall-clock time, sorted assignment) on every change over a pipe, polling
every 10 ms, so times are good to about 10 ms. Every wait is bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import bench_broker, bench_env, emit, metadata_database, run_step
from bench.members import Group, group

PARTITIONS = 12
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 500
COMMIT_PARTITIONS = 3
COMMIT_RATE = 100  # commits per second


def _group(
    conf: dict[str, Any], topic: str, timeout: float
) -> contextlib.AbstractContextManager[Group]:
    return group(conf, topic, timeout, PARTITIONS)


def _stable(group: Group, size: int) -> float | None:
    """Start ``size`` members; seconds from the first subscribe until they are balanced."""
    members = [group.start() for _ in range(size)]
    if not group.wait_balanced(members):
        return None
    first = min(m.subscribed_at or 0.0 for m in members)
    return max(m.assigned_at for m in members) - first


def _summary(runs: list[float | None]) -> dict[str, Any]:
    done = [r for r in runs if r is not None]
    return {
        "repeats": len(runs),
        "timeouts": len(runs) - len(done),
        "seconds_median": round(statistics.median(done), 3) if done else None,
        "seconds_max": round(max(done), 3) if done else None,
        "runs_s": [None if r is None else round(r, 3) for r in runs],
    }


def _add_fourth(group: Group) -> tuple[float | None, float | None]:
    """(seconds for three members to settle, seconds for a fourth to be taken in)."""
    settled = _stable(group, 3)
    if settled is None:
        return None, None
    group.settle(1.0)  # a second of steady heartbeats first
    fourth = group.start()
    # Its subscribe report comes before any assignment report on the same pipe.
    if not group.wait_balanced(group.members) or fourth.subscribed_at is None:
        return settled, None
    return settled, max(m.assigned_at for m in group.members) - fourth.subscribed_at


def add_fourth_member(
    conf: dict[str, Any], topic: str, repeats: int, timeout: float
) -> dict[str, Any]:
    runs: list[float | None] = []
    settled: list[float] = []
    after: list[list[int] | None] = []
    for _ in range(repeats):
        with _group(conf, topic, timeout) as group:
            first, taken_in = _add_fourth(group)
            runs.append(taken_in)
            settled += [first] if first is not None else []
            after = [m.assignment for m in group.members]
    return _summary(runs) | {
        "assignments_after": after,
        "initial_join_3_members_s_median": (
            round(statistics.median(settled), 3) if settled else None
        ),
    }


def _kill9(group: Group) -> float | None:
    """Seconds from SIGKILLing one of four balanced members until the rest are balanced."""
    if _stable(group, 4) is None:
        return None
    group.settle(1.0)
    victim, survivors = group.members[-1], group.members[:-1]
    killed_at = time.time()
    victim.process.kill()
    if not group.wait_balanced(survivors):
        return None
    return max(m.assigned_at for m in survivors) - killed_at


def kill9_member(conf: dict[str, Any], topic: str, repeats: int, timeout: float) -> dict[str, Any]:
    runs: list[float | None] = []
    after: list[list[int] | None] = []
    for _ in range(repeats):
        with _group(conf, topic, timeout) as group:
            runs.append(_kill9(group))
            after = [m.assignment for m in group.members[:-1]]
    return _summary(runs) | {"assignments_after": after}


# --- offset commits ---------------------------------------------------------------------


def paced(
    action: Callable[[int], None], seconds: float, idle: Callable[[], object] | None = None
) -> dict[str, Any]:
    """Call ``action(i)`` COMMIT_RATE times a second for ``seconds``; each call's latency."""
    latencies: list[float] = []
    errors = 0
    interval = 1 / COMMIT_RATE
    start = time.perf_counter()
    due = start
    for i in range(int(seconds * COMMIT_RATE)):
        if idle is not None:
            idle()
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        began = time.perf_counter()
        try:
            action(i)
        except Exception:  # noqa: BLE001 - counted and reported; the run goes on
            errors += 1
        else:
            latencies.append((time.perf_counter() - began) * 1000)
        due = max(due + interval, time.perf_counter() - interval)  # late: no catch-up burst
    elapsed = time.perf_counter() - start
    out: dict[str, Any] = {"commits": len(latencies), "errors": errors}
    out["achieved_per_s"] = round(len(latencies) / elapsed, 1)
    if len(latencies) >= 2:
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        out |= {"p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2)}
        out["max_ms"] = round(max(latencies), 2)
    return out


def commit_latency(
    conf: dict[str, Any], topic: str, seconds: float, timeout: float
) -> dict[str, Any]:
    """One member of a Stable group commits its partitions synchronously, new offsets each time."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(conf | {"group.id": f"bench-commit-{uuid.uuid4().hex[:12]}"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(consumer.assignment()) < COMMIT_PARTITIONS:
            if time.monotonic() > deadline:
                raise TimeoutError("the committing consumer was never assigned its partitions")
            consumer.poll(0.05)
        parts = sorted(tp.partition for tp in consumer.assignment())
        last = [0]

        def commit(i: int) -> None:
            offsets = [TopicPartition(topic, p, i + 1) for p in parts]
            consumer.commit(offsets=offsets, asynchronous=False)
            last[0] = i + 1

        result = paced(commit, seconds, idle=lambda: consumer.poll(0))
        stored = consumer.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        result["last_commit_read_back"] = all(tp.offset == last[0] for tp in stored)
        return result
    finally:
        consumer.close()


def store_baseline(database_url: str | None, work: Path, seconds: float) -> dict[str, Any]:
    """The same paced commits as one multi-row upsert each, straight to the metadata DB."""
    create = (
        "CREATE TABLE bench_offsets (grp TEXT, topic TEXT, part INTEGER, off BIGINT,"
        " PRIMARY KEY (grp, topic, part))"
    )
    if database_url:
        import psycopg

        with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as pg:
            pg.execute(create)

            def pg_commit(i: int) -> None:
                pg.execute(
                    "INSERT INTO bench_offsets VALUES ('g', 't', 0, %s), ('g', 't', 1, %s),"
                    " ('g', 't', 2, %s) ON CONFLICT (grp, topic, part)"
                    " DO UPDATE SET off = excluded.off",
                    (i + 1,) * COMMIT_PARTITIONS,
                )

            try:
                return paced(pg_commit, seconds) | {"client": "psycopg, one statement"}
            finally:
                pg.execute("DROP TABLE bench_offsets")
    lite = sqlite3.connect(work / "baseline.sqlite3", isolation_level=None)
    try:
        lite.execute("PRAGMA journal_mode=WAL")
        lite.execute("PRAGMA synchronous=NORMAL")  # as the embedded metadata store
        lite.execute(create)

        def lite_commit(i: int) -> None:
            lite.execute(
                "INSERT INTO bench_offsets VALUES ('g', 't', 0, ?), ('g', 't', 1, ?),"
                " ('g', 't', 2, ?) ON CONFLICT (grp, topic, part) DO UPDATE SET off = excluded.off",
                (i + 1,) * COMMIT_PARTITIONS,
            )

        return paced(lite_commit, seconds) | {"client": "sqlite3 WAL, one statement"}
    finally:
        lite.close()


# --- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, short commit run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--commit-seconds", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on every wait (s)")
    parser.add_argument("--metadata", choices=["auto", "postgres", "sqlite"], default="auto")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    commit_seconds = 3.0 if args.quick else args.commit_seconds
    work = Path(tempfile.mkdtemp(prefix="millrace-groups-bench-"))
    try:
        database = f"millrace_bench_groups_{os.getpid()}"
        with metadata_database(args.metadata, database) as database_url:
            extra = {"DATABASE_URL": database_url} if database_url else {}
            settings = run_step(bench_env(work, extra), "bench.store", "settings")
            store = "postgres" if "postgresql" in settings["engine"] else "sqlite"
            with bench_broker(work, extra, cpu="1") as (port, _broker):
                os.sched_setaffinity(0, {0})  # members are spawned from here: CPU 0 too
                common = {
                    "metadata_store": store,
                    "group_initial_rebalance_delay_ms": settings["initial_rebalance_delay_ms"],
                    "group_min_session_timeout_ms": settings["min_session_timeout_ms"],
                    "session_timeout_ms": SESSION_TIMEOUT_MS,
                    "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                    "partitions": PARTITIONS,
                }
                _run(port, args, repeats, commit_seconds, database_url, work, common)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _run(
    port: int,
    args: argparse.Namespace,
    repeats: int,
    commit_seconds: float,
    database_url: str | None,
    work: Path,
    common: dict[str, Any],
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    endpoint = perf.Endpoint(f"127.0.0.1:{port}")
    admin = AdminClient(endpoint.confluent())
    topics = {n: f"bench-groups-{n}p-{uuid.uuid4().hex[:8]}" for n in (PARTITIONS, 3)}
    perf.create_topics(admin, [NewTopic(t, n, 1) for n, t in topics.items()])
    conf = endpoint.confluent() | {
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    for strategy, name in (
        ("range", "rebalance_add_fourth_member"),
        ("cooperative-sticky", "rebalance_add_fourth_member_cooperative_sticky"),
    ):
        strategy_conf = conf | {"partition.assignment.strategy": strategy}
        result = add_fourth_member(strategy_conf, topics[PARTITIONS], repeats, args.timeout)
        emit(name, strategy=strategy, members_before=3, members_after=4, **common, **result)
    range_conf = conf | {"partition.assignment.strategy": "range"}
    result = kill9_member(range_conf, topics[PARTITIONS], repeats, args.timeout)
    target = (SESSION_TIMEOUT_MS + 1000) / 1000
    emit("rebalance_after_kill9", strategy="range", target_s=target, **common, **result)
    commits = commit_latency(range_conf, topics[3], commit_seconds, args.timeout)
    baseline = store_baseline(database_url, work, commit_seconds)
    emit(
        "offset_commit_latency",
        metadata_store=common["metadata_store"],
        rate_per_s=COMMIT_RATE,
        seconds=commit_seconds,
        partitions_per_commit=COMMIT_PARTITIONS,
        **commits,
        store_baseline=baseline,
    )


if __name__ == "__main__":
    sys.exit(main())
