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
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import bench_broker, emit, rss_mb


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
    before = rss_mb(pid)
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
        return {"rss_before_mb": before, "rss_stalled_mb": rss_mb(pid)}
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
            broker_rss_mb=rss_mb(broker.pid),
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
        broker_rss_mb=rss_mb(broker.pid),
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
    emit("idle_partitions", partitions=1000, broker_rss_mb=rss_mb(broker.pid))
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
