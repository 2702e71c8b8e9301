"""Data API benchmark: ``python -m bench.streams [--quick]``.

``make bench-streams`` runs it. It starts one broker (SASL only) and the web tier (daphne
on ``control_plane.asgi``, as in production) on loopback, on a throwaway Postgres database
(dropped at the end) and Redis for the channel layer. Clients use one API key of the
default tenant (quotas raised) that may do anything. The broker, daphne, Postgres and the
clients share the machine's cores. Prints one JSON line per workload:

* ``rest_produce_json_batch500``: one client (one keep-alive HTTP connection) POSTs
  batches of 500 JSON records (about 100 bytes each) with acks=all, one batch after
  another. Baseline in the same run: confluent-kafka producing the same records over the
  Kafka protocol (acks=all, linger 5 ms).
* ``ws_stream_delivery``: one WebSocket client (``websockets``) subscribes from the
  earliest offset with a window of 5,000 and acknowledges each frame; records/s received.
  Baseline: a confluent-kafka consumer reading the same records.
* ``ws_produce_to_receipt_latency``: confluent-kafka produces 1,000 records/s (acks=1,
  linger 0) with the send time in the value; a WebSocket client subscribed at the end
  receives them. Latency is receipt time minus send time, from the scheduled send time.
* ``ws_non_acking_client_memory``: daphne's resident memory before a client subscribes to
  the whole backlog with a window of 1,000 and never acknowledges, and 5 s later.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import emit, free_port, rss_mb, sasl_broker, start_web, stop_process

TOPIC = "bench-streams"
PARTITIONS = 6


def _record(i: int) -> dict[str, Any]:
    return {"value": {"id": i, "user": f"user-{i % 1000:04d}", "action": "click", "n": i * 7}}


def _confluent(bootstrap: str, key: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": key["username"],
        "sasl.password": key["password"],
        **extra,
    }


def rest_produce(port: int, auth: str, tenant: str, batches: int) -> tuple[float, int]:
    """(records/s, failed records) for ``batches`` sequential POSTs of 500 records."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": auth, "Content-Type": "application/json"}
    url = f"/api/v1/tenants/{tenant}/topics/{TOPIC}/records/"
    bodies = [
        json.dumps({"records": [_record(b * 500 + i) for i in range(500)]}).encode()
        for b in range(min(batches, 20))
    ]
    failed = 0
    started = time.perf_counter()
    for b in range(batches):
        conn.request("POST", url, bodies[b % len(bodies)], headers)
        response = conn.getresponse()
        body = json.loads(response.read())
        if response.status != 200:
            failed += body.get("failed", 500)
    elapsed = time.perf_counter() - started
    conn.close()
    return batches * 500 / elapsed, failed


def kafka_produce(bootstrap: str, key: dict[str, str], records: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(_confluent(bootstrap, key, **{"linger.ms": 5, "acks": "all"}))
    values = [json.dumps(_record(i)["value"]).encode() for i in range(500)]
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=values[i % 500])
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    return records / (time.perf_counter() - started)


def kafka_consume(bootstrap: str, key: dict[str, str], records: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(_confluent(bootstrap, key, **{"group.id": "bench-baseline"}))
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < records and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return got / elapsed


async def ws_deliver(port: int, auth: str, tenant: str, records: int) -> float:
    import websockets

    url = f"ws://127.0.0.1:{port}/ws/v1/tenants/{tenant}/stream"
    async with websockets.connect(
        url, additional_headers={"Authorization": auth}, max_size=2**24
    ) as ws:
        await ws.recv()
        await ws.send(
            json.dumps({"type": "subscribe", "topics": [TOPIC], "from": "earliest", "window": 5000})
        )
        got = 0
        started = None
        deadline = time.monotonic() + 180
        while got < records and time.monotonic() < deadline:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if frame["type"] != "records":
                continue
            if started is None:
                started = time.perf_counter()
            got += len(frame["records"])
            last: dict[tuple[str, int], int] = {}
            for r in frame["records"]:
                last[(r["topic"], r["partition"])] = r["offset"]
            offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), o in last.items()]
            await ws.send(json.dumps({"type": "ack", "offsets": offsets}))
        assert started is not None
        return got / (time.perf_counter() - started)


async def ws_latency(
    port: int, auth: str, tenant: str, bootstrap: str, key: dict[str, str], seconds: float
) -> dict[str, Any]:
    import websockets
    from confluent_kafka import Producer

    url = f"ws://127.0.0.1:{port}/ws/v1/tenants/{tenant}/stream"
    latencies: list[float] = []
    async with websockets.connect(url, additional_headers={"Authorization": auth}) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "subscribe", "topics": [TOPIC], "from": "latest"}))
        while json.loads(await ws.recv())["type"] != "subscribed":
            pass
        await asyncio.sleep(2)  # the consumer found the ends of the partitions
        total = int(seconds * 1000)
        done = threading.Event()

        def produce() -> None:
            producer = Producer(_confluent(bootstrap, key, **{"linger.ms": 0, "acks": "1"}))
            start = time.time() + 0.2
            for i in range(total):
                due = start + i / 1000
                pause = due - time.time()
                if pause > 0:
                    time.sleep(pause)
                producer.produce(TOPIC, value=json.dumps({"t": due}).encode())
                producer.poll(0)
            producer.flush(30)
            done.set()

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        deadline = time.monotonic() + seconds + 30
        while len(latencies) < total and time.monotonic() < deadline:
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 5))
            except TimeoutError:
                if done.is_set():
                    break
                continue
            now = time.time()
            if frame["type"] != "records":
                continue
            last: dict[tuple[str, int], int] = {}
            for r in frame["records"]:
                latencies.append((now - r["value"]["t"]) * 1000)
                last[(r["topic"], r["partition"])] = r["offset"]
            offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), o in last.items()]
            await ws.send(json.dumps({"type": "ack", "offsets": offsets}))
        thread.join(30)
    latencies.sort()
    return {
        "rate_per_s": 1000,
        "sent": total,
        "received": len(latencies),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "max_ms": round(latencies[-1], 2),
    }


async def ws_hold(port: int, auth: str, tenant: str, web_pid: int) -> dict[str, Any]:
    import websockets

    url = f"ws://127.0.0.1:{port}/ws/v1/tenants/{tenant}/stream"
    before = rss_mb(web_pid)
    async with websockets.connect(url, additional_headers={"Authorization": auth}) as ws:
        await ws.recv()
        await ws.send(
            json.dumps({"type": "subscribe", "topics": [TOPIC], "from": "earliest", "window": 1000})
        )
        received = 0
        end = time.monotonic() + 5
        while time.monotonic() < end:
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
            except TimeoutError:
                continue
            received += len(frame.get("records", []))
        after = rss_mb(web_pid)
    return {"window": 1000, "received": received, "rss_mb_before": before, "rss_mb_after": after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (CI smoke test)")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    args = parser.parse_args(argv)
    batches = 20 if args.quick else 400
    latency_seconds = 3 if args.quick else 20
    work = Path(tempfile.mkdtemp(prefix="millrace-bench-streams-"))
    redis = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/14"
    with sasl_broker(f"millrace_bench_streams_{os.getpid()}", work, {"REDIS_URL": redis}) as (
        env,
        key,
        broker_port,
    ):
        auth = "Basic " + base64.b64encode(f"{key['username']}:{key['password']}".encode()).decode()
        web_port = free_port()
        web = None
        try:
            web = start_web(env, web_port, work / "web.log")
            bootstrap = f"127.0.0.1:{broker_port}"
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient(_confluent(bootstrap, key))
            perf.create_topics(admin, [NewTopic(TOPIC, PARTITIONS, 1)])
            rest_produce(web_port, auth, "default", 4)  # warm up: connections, producer
            rest_rate, failed = rest_produce(web_port, auth, "default", batches)
            kafka_rate = kafka_produce(bootstrap, key, batches * 500)
            emit(
                "rest_produce_json_batch500",
                records=batches * 500,
                records_per_s=round(rest_rate),
                failed=failed,
                baseline_kafka_protocol_records_per_s=round(kafka_rate),
                target_records_per_s=20_000,
            )
            total = (batches + 4) * 500 + batches * 500  # everything produced above
            ws_rate = asyncio.run(ws_deliver(web_port, auth, "default", total))
            kafka_read = kafka_consume(bootstrap, key, total)
            emit(
                "ws_stream_delivery",
                records=total,
                records_per_s=round(ws_rate),
                baseline_kafka_consumer_records_per_s=round(kafka_read),
                target_records_per_s=20_000,
            )
            latency = asyncio.run(
                ws_latency(web_port, auth, "default", bootstrap, key, latency_seconds)
            )
            emit("ws_produce_to_receipt_latency", **latency, target_p99_ms=50)
            emit(
                "ws_non_acking_client_memory",
                backlog_records=total,
                **asyncio.run(ws_hold(web_port, auth, "default", web.pid)),
            )
        finally:
            if web is not None:
                stop_process(web, grace=15)
            if args.keep:
                print(f"logs in {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
