"""Broker benchmark: ``python -m bench.broker [--quick]`` (``make bench-broker``).

Starts a broker (embedded metadata, development listener, quotas raised) pinned to CPU 1,
drives it from this process pinned to CPU 0 with confluent-kafka, and measures Redis
Streams on the same machine in the same run (redis-py, pipelines of 1,000 XADDs; XRANGE
pages of 10,000 for reading). The backlog is also read by a raw client at Fetch v3
(message format v1, down-converted by the broker) and at Fetch v12 (record batches), the
same client and fetch sizes for both: what down-conversion costs old consumers; and by
Sarama (Go, from Debian's packages, when installed) pinned at Kafka 0.10.2 (Fetch v3)
and at its highest version, a real consumer decoding every record both ways. Prints
one JSON line per workload, medians of ``--repeats`` runs for the produce workloads.
Durability: neither side fsyncs (Millrace leaves flushing to the OS by default; the Redis
server here runs without AOF or RDB).
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
from bench.common import bench_broker, emit, rss_mb, sarama_scenario


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


def _raw_backlog_fetch(port: int, topic: str, records: int, version: int, pid: int) -> dict:
    """Read ``records`` of ``topic`` from offset 0 with Fetch ``version`` over one raw
    connection (1 MiB per fetch), as fast as the broker answers: the same client for
    the old formats (v3: format v1, down-converted) and record batches (v12), so the
    difference is the broker's. Records/s, and the broker's peak RSS seen meanwhile."""
    import struct

    from data_plane.protocol.headers import write_request_header
    from data_plane.protocol.messages import APIS
    from data_plane.records.batch import read_header

    fetch = APIS[1]
    flexible = fetch.request.is_flexible(version)
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    offset, got, peak, n = 0, 0, rss_mb(pid), 0
    started = time.perf_counter()
    try:
        while got < records:
            body = {
                "replica_id": -1,
                "max_wait_ms": 500,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            n += 1
            frame = write_request_header(1, version, n, "bench-raw", 2 if flexible else 1)
            frame += fetch.request.encode(body, version)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", _recv(sock, 4))[0]
            data = _recv(sock, size)
            header = 4 + (1 if flexible else 0)  # correlation id (+ tagged fields)
            answer = fetch.response.decode(data[header:], version)
            records_bytes = bytes(answer["responses"][0]["partitions"][0]["records"] or b"")
            last = _last_offset(records_bytes, version, read_header)
            if last is None:
                break
            got += last + 1 - offset
            offset = last + 1
            if n % 200 == 0:
                peak = max(peak, rss_mb(pid))
    finally:
        sock.close()
    seconds = time.perf_counter() - started
    return {
        "records": got,
        "records_per_s": round(got / seconds),
        "broker_peak_rss_mb": max(peak, rss_mb(pid)),
    }


def _sarama_read(scenario: Path, port: int, topic: str, records: int, version: str) -> dict:
    """Records/s of Sarama's partition consumer reading ``records`` of partition 0."""
    import json

    done = subprocess.run(  # noqa: S603 - our own command line
        [
            str(scenario),
            f"-broker=127.0.0.1:{port}",
            f"-version={version}",
            f"-topic={topic}",
            f"-count={records}",
            "-bench",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        check=True,
    )
    steps = [json.loads(line) for line in done.stdout.splitlines()]
    last = steps[-1]
    if last["step"] != "read" or not last["ok"]:
        raise RuntimeError(f"Sarama read failed: {steps}")
    return {"records": last["value"]["records"], "records_per_s": last["value"]["records_per_s"]}


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        out += chunk
    return bytes(out)


def _last_offset(data: bytes, version: int, read_header: Any) -> int | None:
    """The last offset in a Fetch answer's records: batches (v4+) or messages (v0-3)."""
    import struct

    last, pos = None, 0
    while pos + 12 <= len(data):
        if version >= 4:
            header = read_header(data, pos)
            if pos + header.size > len(data):
                break
            last, pos = header.last_offset, pos + header.size
        else:
            offset, size = struct.unpack_from(">qi", data, pos)
            if pos + 12 + size > len(data):
                break
            last, pos = offset, pos + 12 + size
    return last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--metering-only", action="store_true", help="only the metering on/off comparison"
    )
    args = parser.parse_args(argv)
    scale = 0.02 if args.quick else 1.0
    repeats = 1 if args.quick else args.repeats
    work = Path(tempfile.mkdtemp(prefix="millrace-broker-bench-"))
    try:
        if not args.metering_only:
            with bench_broker(work / "main", cpu="1") as (port, broker):
                _run(port, broker, scale, repeats)
        _metering(work, scale, max(repeats, 3 if not args.quick else 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _metering(work: Path, scale: float, repeats: int) -> None:
    """The produce path with usage metering off and on (reporting every second, the
    worst case), brokers started in turn, off and on alternating: the same-run ratio."""
    records = int(2_000_000 * scale)
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(repeats):
        for mode in ("off", "on"):
            env = {
                "MILLRACE_BROKER_METERING": "1" if mode == "on" else "0",
                "MILLRACE_BROKER_USAGE_REPORT_SECONDS": "1",
            }
            with bench_broker(work / f"metering-{mode}-{i}", env, cpu="1") as (port, _):
                os.sched_setaffinity(0, {0})
                endpoint = perf.Endpoint(f"127.0.0.1:{port}")
                from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

                name = f"bench-{uuid.uuid4().hex[:8]}"
                perf.create_topics(AdminClient(endpoint.confluent()), [NewTopic(name, 1, 1)])
                os.sync()
                run = perf.produce(endpoint, name, records=records, size=100)
                rates[mode].append(run["records_per_s"])
    off, on = _median(rates["off"]), _median(rates["on"])
    emit(
        "produce_100b_metering",
        records=records,
        repeats=repeats,
        metering_off_records_per_s=off,
        metering_on_records_per_s=on,
        off_runs=rates["off"],
        on_runs=rates["on"],
        ratio=round(on / off, 3),
    )


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
    # Old consumers (Fetch v3, message format v1) against record batches (Fetch v12), the
    # same raw client for both, half the backlog each way (1 GB at full scale).
    half = backlog_records // 2
    for name, version in (
        ("consume_backlog_100b_format_v1", 3),
        ("consume_backlog_100b_raw_v12", 12),
    ):
        read = _raw_backlog_fetch(port, backlog, half, version, broker.pid)
        emit(name, fetch_version=version, **read)
    # The same with a real consumer that decodes every record: Sarama (Go) pinned at Kafka
    # 0.10.2 (Fetch v3, format v1) and at its highest version (record batches).
    scenario = sarama_scenario(Path(tempfile.mkdtemp(prefix="millrace-sarama-")))
    if scenario is None:
        print("# Sarama workloads skipped: needs golang-go and golang-github-shopify-sarama-dev")
    else:
        for name, version in (
            ("consume_backlog_100b_sarama_format_v1", "0.10.2.0"),
            ("consume_backlog_100b_sarama_batches", "max"),
        ):
            peak = rss_mb(broker.pid)
            read = _sarama_read(scenario, port, backlog, half, version)
            emit(name, sarama_version=version, broker_rss_mb=max(peak, rss_mb(broker.pid)), **read)
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
