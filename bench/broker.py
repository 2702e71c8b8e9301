"""Broker benchmark: ``python -m bench.broker [--quick]`` (``make bench-broker``).

Starts a broker (embedded metadata, development listener, quotas raised) pinned to CPU 1,
drives it from this process pinned to CPU 0 with confluent-kafka, and measures Redis
Streams on the same machine in the same run (redis-py, pipelines of 1,000 XADDs; XRANGE
pages of 10,000 for reading). Prints one JSON line per workload, medians of ``--repeats``
runs for the produce workloads. Durability: neither side fsyncs (Millrace leaves flushing
to the OS by default; the Redis server here runs without AOF or RDB).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import perf

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def emit(name: str, **fields: Any) -> None:
    print(json.dumps({"workload": name, **fields}), flush=True)


def manage(env: dict[str, str], *args: str) -> str:
    """Run one ``manage.py`` command to completion; its standard output."""
    result = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return result.stdout.decode()


def bench_env(work: Path, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a bench broker: embedded metadata unless ``extra_env`` says else."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(MILLRACE_DATA_DIR=str(work / "data"), PYTHONUNBUFFERED="1")
    env.update(extra_env or {})
    return env


@contextlib.contextmanager
def metadata_database(choice: str, name: str) -> Iterator[str | None]:
    """A fresh Postgres database ``name`` (its URL), dropped at the end; None: SQLite.

    The server is the one of ``DATABASE_URL`` (or 127.0.0.1:5432 as ``postgres``).
    ``choice`` "auto" falls back to SQLite when no Postgres answers, "postgres" raises.
    """
    if choice == "sqlite":
        yield None
        return
    import psycopg
    from psycopg import sql

    server = urlsplit(os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES)
    database = sql.Identifier(name)
    admin_url = server._replace(path="/postgres").geturl()
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(database))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(database))
    except psycopg.OperationalError as exc:
        if choice == "postgres":
            raise
        print(f"no Postgres at {server.netloc} ({exc}); using SQLite", file=sys.stderr)
        yield None
        return
    try:
        yield server._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))


def prepare_store(env: dict[str, str]) -> None:
    """Migrate the metadata store and raise the default tenant's quotas."""
    manage(env, "migrate", "-v0")
    manage(
        env,
        "shell",
        "-c",
        "from control_plane.core.bootstrap import ensure_first_admin as e; e();"
        "from control_plane.tenancy.models import Tenant;"
        "Tenant.objects.filter(slug='default').update(produce_byte_rate=2**40,"
        " fetch_byte_rate=2**40, max_partitions=100000, max_storage_bytes=2**50)",
    )


def start_broker(
    env: dict[str, str],
    *,
    port: int,
    data_dir: Path,
    log_path: Path,
    broker_id: int | None = None,
    cpu: str | None = None,
    anonymous: bool = True,
) -> subprocess.Popen[bytes]:
    """Run ``manage.py broker`` on loopback; return once it is ready.

    The log is appended to ``log_path``; only this start's "ready on" line counts. Pinned
    to ``cpu`` with taskset if given. Stopped again if it does not come up within 60 s.
    ``anonymous``: the development listener, which takes unauthenticated clients as the
    default tenant (and then refuses SASL on the same connection); else SASL only.
    """
    seen = log_path.stat().st_size if log_path.exists() else 0
    pin = [shutil.which("taskset") or "/usr/bin/taskset", "-c", cpu] if cpu else []
    ident = ["--id", str(broker_id)] if broker_id is not None else []
    with open(log_path, "ab") as log:
        broker = subprocess.Popen(  # noqa: S603 - our own command line
            [
                *pin,
                sys.executable,
                "manage.py",
                "broker",
                *ident,
                "--port",
                str(port),
                *(["--allow-anonymous"] if anonymous else []),
                "--data-dir",
                str(data_dir),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while "ready on" not in log_path.read_bytes()[seen:].decode(errors="replace"):
        if broker.poll() is not None or time.monotonic() > deadline:
            stop_process(broker)
            raise RuntimeError(log_path.read_text(errors="replace")[-2000:])
        time.sleep(0.2)
    return broker


def stop_process(process: subprocess.Popen[bytes], grace: float = 60) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextlib.contextmanager
def bench_broker(
    work: Path, extra_env: Mapping[str, str] | None = None, cpu: str | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Migrate, raise the default tenant's quotas, and run ``manage.py broker`` on loopback.

    Yields (port, process); the broker (pinned to ``cpu`` with taskset if given) is
    stopped on exit. Its log is ``work / "broker.log"``.
    """
    env = bench_env(work, extra_env)
    prepare_store(env)
    port = free_port()
    broker = start_broker(
        env, port=port, data_dir=work / "broker", log_path=work / "broker.log", cpu=cpu
    )
    try:
        yield port, broker
    finally:
        stop_process(broker)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _redis_streams(records: int, size: int) -> tuple[float, float]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379)
    key = f"millrace-bench-{uuid.uuid4().hex}"
    payload = os.urandom(size)
    try:
        start = time.perf_counter()
        for done in range(0, records, 1000):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(1000, records - done)):
                pipe.xadd(key, {"v": payload})
            pipe.execute()
        produce_s = time.perf_counter() - start
        start, got = time.perf_counter(), 0
        last: Any = "-"
        while got < records:
            page: Any = client.xrange(key, min=last, max="+", count=10_000)
            if last != "-":
                page = page[1:]
            if not page:
                break
            got += len(page)
            last = page[-1][0]
        consume_s = time.perf_counter() - start
        return records / produce_s, got / consume_s
    finally:
        client.delete(key)


def _stalled_consumers(
    port: int, topic: str, pid: int, connections: int = 20, pipelined: int = 20
) -> dict[str, Any]:
    """Open consumers that pipeline big fetches and never read; report broker RSS."""
    import struct

    from data_plane.protocol.headers import write_request_header
    from data_plane.protocol.messages import APIS

    fetch = APIS[1].request
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 64 * 2**20}
    body = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 64 * 2**20,
        "isolation_level": 0,
        "session_id": 0,
        "topics": [{"topic": topic, "partitions": [part]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    before = _rss_mb(pid)
    socks = []
    try:
        for _ in range(connections):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            for n in range(pipelined):
                frame = write_request_header(1, 12, n, "stalled", 2) + fetch.encode(body, 12)
                sock.sendall(struct.pack(">i", len(frame)) + frame)
            socks.append(sock)
        time.sleep(5)
        return {"rss_before_mb": before, "rss_stalled_mb": _rss_mb(pid)}
    finally:
        for sock in socks:
            sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    scale = 0.02 if args.quick else 1.0
    repeats = 1 if args.quick else args.repeats
    work = Path(tempfile.mkdtemp(prefix="millrace-broker-bench-"))
    try:
        with bench_broker(work, cpu="1") as (port, broker):
            _run(port, broker, scale, repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _run(port: int, broker: subprocess.Popen[bytes], scale: float, repeats: int) -> None:
    os.sched_setaffinity(0, {0})
    endpoint = perf.Endpoint(f"127.0.0.1:{port}")
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(endpoint.confluent())

    def topic(partitions: int = 1) -> str:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        perf.create_topics(admin, [NewTopic(name, partitions, 1)])
        return name

    for size, records in ((100, int(2_000_000 * scale)), (1024, int(600_000 * scale))):
        runs = []
        for _ in range(repeats):
            os.sync()  # earlier runs' dirty pages must not throttle this one's writes
            runs.append(perf.produce(endpoint, topic(), records=records, size=size))
        rates = [r["records_per_s"] for r in runs]
        best = sorted(runs, key=lambda r: r["records_per_s"])[len(runs) // 2]
        emit(
            f"produce_{size}b_acks1_1p",
            records=records,
            repeats=repeats,
            records_per_s=_median(rates),
            records_per_s_range=[min(rates), max(rates)],
            mb_per_s=round(_median(rates) * size / 2**20, 1),
            p50_ms=best.get("p50_ms"),
            p99_ms=best.get("p99_ms"),
            broker_rss_mb=_rss_mb(broker.pid),
        )
    backlog = topic()
    backlog_records = int(20_000_000 * scale)  # 2 GB of 100-byte records at full scale
    perf.produce(endpoint, backlog, records=backlog_records, size=100, timeout=1200)
    consumed = perf.consume(endpoint, backlog, records=backlog_records, timeout=1200)
    emit(
        "consume_backlog_100b",
        records=consumed["records"],
        records_per_s=consumed["records_per_s"],
        mb_per_s=consumed["mb_per_s"],
        broker_rss_mb=_rss_mb(broker.pid),
    )
    redis_records = int(1_000_000 * scale)
    redis_produce, redis_consume = _redis_streams(redis_records, 100)
    emit(
        "redis_streams_100b",
        records=redis_records,
        client="redis-py pipeline 1000",
        produce_records_per_s=round(redis_produce),
        consume_records_per_s=round(redis_consume),
        persistence="none",
    )
    wide = topic(partitions=1000)
    from confluent_kafka import Producer

    producer = Producer(endpoint.confluent())
    for p in range(1000):
        producer.produce(wide, b"x", partition=p)
    producer.flush(60)
    time.sleep(2)
    emit("idle_partitions", partitions=1000, broker_rss_mb=_rss_mb(broker.pid))
    stalled = _stalled_consumers(port, backlog, broker.pid)
    emit(
        "stalled_consumers",
        connections=20,
        pipelined_fetches=20,
        fetch_max_mb=64,
        backlog_mb=round(backlog_records * 100 / 2**20),
        **stalled,
    )


if __name__ == "__main__":
    sys.exit(main())
