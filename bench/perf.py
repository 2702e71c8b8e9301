"""Producer/consumer performance tools, like Kafka's own ``*-perf-test`` scripts.

The benchmarks' load generator. Usable against any Kafka-compatible endpoint:
``python -m bench.perf produce|consume --topic T ...`` (or ``manage.py perf``, a thin
wrapper). Prints one JSON line: records/s, MB/s and, for produce, latency percentiles
measured from each record's send call to its delivery acknowledgement. Clients:
``confluent`` (librdkafka, default), ``kafka-python``, ``aiokafka``. Every run is bounded
by ``--records`` and ``--timeout``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class Endpoint:
    bootstrap: str
    username: str | None = None
    password: str | None = None
    mechanism: str = "SCRAM-SHA-256"

    def confluent(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap}
        if self.username:
            conf.update(
                {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": self.mechanism,
                    "sasl.username": self.username,
                    "sasl.password": self.password,
                }
            )
        return conf

    def python(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap_servers": self.bootstrap}
        if self.username:
            conf.update(
                {
                    "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": self.mechanism,
                    "sasl_plain_username": self.username,
                    "sasl_plain_password": self.password,
                }
            )
        return conf


def _percentiles(latencies_ms: list[float]) -> dict[str, float]:
    if not latencies_ms:
        return {}
    ordered = sorted(latencies_ms)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "p999_ms": at(0.999), "max_ms": ordered[-1]}


def _summary(
    kind: str, client: str, records: int, size: int, seconds: float, **extra: Any
) -> dict[str, Any]:
    return {
        "tool": kind,
        "client": client,
        "records": records,
        "record_bytes": size,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "mb_per_s": round(records * size / seconds / 2**20, 1),
        **extra,
    }


def produce(
    endpoint: Endpoint,
    topic: str,
    *,
    records: int,
    size: int,
    acks: str = "1",
    linger_ms: int = 5,
    batch_bytes: int = 2**20,
    compression: str = "none",
    client: str = "confluent",
    timeout: float = 300,
) -> dict[str, Any]:
    payload = os.urandom(size)
    if client == "confluent":
        from confluent_kafka import Producer

        conf = endpoint.confluent() | {
            "acks": acks,
            "linger.ms": linger_ms,
            "batch.size": batch_bytes,
            "compression.type": compression,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2**21,
        }
        producer = Producer(conf)
        latencies: list[float] = []
        errors = 0
        sample_every = max(1, records // 100_000)

        def make_callback(sent: float) -> Any:
            def done(err: Any, msg: Any) -> None:
                nonlocal errors
                if err is not None:
                    errors += 1
                else:
                    latencies.append((time.perf_counter() - sent) * 1000)

            return done

        start = time.perf_counter()
        deadline = start + timeout
        for i in range(records):
            callback = make_callback(time.perf_counter()) if i % sample_every == 0 else None
            while True:
                try:
                    producer.produce(topic, payload, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(0.005)
            if i % 10_000 == 0:
                producer.poll(0)
                if time.perf_counter() > deadline:
                    raise TimeoutError("produce run exceeded --timeout")
        remaining = producer.flush(max(1.0, deadline - time.perf_counter()))
        seconds = time.perf_counter() - start
        return _summary(
            "produce",
            client,
            records,
            size,
            seconds,
            acks=acks,
            linger_ms=linger_ms,
            compression=compression,
            errors=errors,
            undelivered=remaining,
            latency_sampled=len(latencies),
            **_percentiles(latencies),
        )
    if client == "kafka-python":
        from kafka import KafkaProducer  # type: ignore[import-untyped]

        kp = KafkaProducer(
            acks=int(acks) if acks != "all" else "all",
            linger_ms=linger_ms,
            batch_size=batch_bytes,
            **endpoint.python(),
        )
        start = time.perf_counter()
        for _ in range(records):
            kp.send(topic, payload)
        kp.flush(timeout)
        seconds = time.perf_counter() - start
        kp.close()
        return _summary("produce", client, records, size, seconds, acks=acks)
    if client == "aiokafka":
        return asyncio.run(_aiokafka_produce(endpoint, topic, records, payload, acks, linger_ms))
    raise ValueError(f"unknown client {client!r}")


async def _aiokafka_produce(
    endpoint: Endpoint, topic: str, records: int, payload: bytes, acks: str, linger_ms: int
) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    producer = AIOKafkaProducer(
        acks=int(acks) if acks != "all" else "all", linger_ms=linger_ms, **endpoint.python()
    )
    await producer.start()
    start = time.perf_counter()
    pending = []
    for _ in range(records):
        pending.append(await producer.send(topic, payload))
        if len(pending) >= 10_000:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    seconds = time.perf_counter() - start
    await producer.stop()
    return _summary("produce", "aiokafka", records, len(payload), seconds, acks=acks)


def consume(
    endpoint: Endpoint,
    topic: str,
    *,
    records: int,
    partitions: int = 1,
    client: str = "confluent",
    timeout: float = 300,
) -> dict[str, Any]:
    if client != "confluent":
        raise ValueError("consume supports the confluent client")
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        endpoint.confluent()
        | {
            "group.id": "millrace-perf",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 2**20,
            "max.partition.fetch.bytes": 10 * 2**20,
            "queued.max.messages.kbytes": 2**20,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) once
            # its local queue holds queued.min.messages; a throughput test must not
            # measure that pause.
            "queued.min.messages": 2_000_000,
            "fetch.queue.backoff.ms": 5,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    deadline = start + timeout
    size = 0
    while got < records and time.perf_counter() < deadline:
        batch = consumer.consume(10_000, 1.0)
        if not batch:
            continue
        # Keep the client's own per-message work minimal: the broker is what is measured.
        errors = sum(1 for msg in batch if msg.error() is not None)
        got += len(batch) - errors
        if not size and len(batch) > errors:
            size = len(batch[-1].value() or b"")
    seconds = time.perf_counter() - start
    consumer.close()
    return _summary("consume", client, got, size, seconds, wanted=records)


def read_all(
    conf: dict[str, Any], topic: str, partitions: int, records: int, timeout: float = 300
) -> float:
    """Seconds for a confluent-kafka consumer (``conf``), assigned every partition of
    ``topic`` from offset 0, to receive ``records`` records: the same-run baseline of the
    benchmarks that read a topic another way. Raises if it gets fewer within ``timeout``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    while got < records and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(10_000, timeout=1) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    if got < records:
        raise RuntimeError(f"the consumer read {got} of {records} records")
    return elapsed


def create_topics(admin: Any, topics: list[Any], timeout: float = 30) -> None:
    """Create ``topics`` (confluent_kafka ``NewTopic``s) with ``admin``, asking again when
    librdkafka fails the request locally: right after it starts (or when a broker leaves its
    metadata) it replaces a broker handle and fails what was in flight on the old one with
    _DESTROY_BROKER, and a dropped connection gives _TRANSPORT. Up to three tries; a topic
    an earlier try made counts as created."""
    from confluent_kafka import KafkaError, KafkaException

    retriable = (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT)
    pending = list(topics)
    for attempt in range(3):
        futures = admin.create_topics(pending)
        failed = []
        for new in pending:
            try:
                futures[new.topic].result(timeout)
            except KafkaException as exc:
                code = exc.args[0].code()
                if attempt and code == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                if code not in retriable or attempt == 2:
                    raise
                failed.append(new)
        if not failed:
            return
        pending = failed
        time.sleep(0.2 * (attempt + 1))


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line of ``python -m bench.perf`` and ``manage.py perf``."""
    parser.add_argument("mode", choices=["produce", "consume"])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--acks", default="1", choices=["0", "1", "all"])
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=2**20)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument(
        "--client", default="confluent", choices=["confluent", "kafka-python", "aiokafka"]
    )
    parser.add_argument("--username", help="API key id (SASL); omit for no auth")
    parser.add_argument("--password", help="API key secret (or PERF_PASSWORD env)")
    parser.add_argument("--mechanism", default="SCRAM-SHA-256")
    parser.add_argument("--timeout", type=float, default=300)


def run(options: Mapping[str, Any]) -> dict[str, Any]:
    """One produce or consume run as ``options`` (parsed :func:`add_arguments`) say."""
    endpoint = Endpoint(
        options["bootstrap"],
        options["username"],
        options["password"] or os.environ.get("PERF_PASSWORD"),
        options["mechanism"],
    )
    if options["mode"] == "produce":
        return produce(
            endpoint,
            options["topic"],
            records=options["records"],
            size=options["record_size"],
            acks=options["acks"],
            linger_ms=options["linger_ms"],
            batch_bytes=options["batch_bytes"],
            compression=options["compression"],
            client=options["client"],
            timeout=options["timeout"],
        )
    return consume(
        endpoint,
        options["topic"],
        records=options["records"],
        partitions=options["partitions"],
        client=options["client"],
        timeout=options["timeout"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.perf",
        description="Kafka producer/consumer performance test (prints one JSON line).",
    )
    add_arguments(parser)
    emit(run(vars(parser.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
