"""Spark batch-read benchmark: ``python -m bench.spark [--quick]``.

``make bench-spark`` runs it. It starts one broker (SASL only) on loopback on a throwaway
Postgres database (dropped at the end), produces 1,000,000 records with 100-byte values
to a topic of 6 partitions, and prints one JSON line:

* ``spark_batch_count``: ``spark.read.format("millrace")...load().count()`` in a local
  Spark session (``local[2]``: the machine's two cores), after one warm-up query that
  starts the Python workers; records/s. Baselines in the same run, reading the same
  records: Millrace's own client alone (one process, the partitions one after another,
  the code each Spark task runs) and a confluent-kafka consumer (librdkafka).

The broker, Spark's JVM, its Python workers and the baselines share the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import perf
from bench.common import emit, sasl_broker

TOPIC = "bench-spark"
PARTITIONS = 6
VALUE = b"v" * 100


def _confluent(bootstrap: str, key: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": key["username"],
        "sasl.password": key["password"],
        **extra,
    }


def produce(bootstrap: str, key: dict[str, str], records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(_confluent(bootstrap, key, acks="all", **{"linger.ms": 20}))
    for i in range(records):
        while True:
            try:
                producer.produce(
                    TOPIC, value=VALUE, key=b"%d" % (i % 1000), partition=i % PARTITIONS
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records were not acknowledged")


def read_with_own_client(bootstrap: str, key: dict[str, str]) -> tuple[int, float]:
    """(records, seconds): every partition read to its end with data_plane.client."""
    from data_plane.spark.options import settings
    from data_plane.spark.source import plan, read_range

    s = settings(
        {
            "bootstrap.servers": bootstrap,
            "api.key": key["username"],
            "api.secret": key["password"],
            "subscribe": TOPIC,
        }
    )
    started = time.perf_counter()
    count = sum(1 for r in plan(s) for _ in read_range(s, r))
    return count, time.perf_counter() - started


def read_with_confluent(bootstrap: str, key: dict[str, str], records: int) -> float:
    conf = _confluent(bootstrap, key, **{"group.id": "bench-spark"})
    return perf.read_all(conf, TOPIC, PARTITIONS, records)


def spark_count(bootstrap: str, key: dict[str, str], records: int) -> tuple[int, float, float]:
    """(count, seconds, session start seconds) in a local Spark session."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    from data_plane.spark import MillraceDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("millrace-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MillraceDataSource)
    session_s = time.perf_counter() - started

    def frame(**extra: str) -> Any:
        reader = (
            spark.read.format("millrace")
            .option("bootstrap.servers", bootstrap)
            .option("api.key", key["username"])
            .option("api.secret", key["password"])
            .option("subscribe", TOPIC)
        )
        for name, value in extra.items():
            reader = reader.option(name, value)
        return reader.load()

    warm = json.dumps({TOPIC: {str(p): 100 for p in range(PARTITIONS)}})
    frame(endingOffsets=warm).count()  # Python workers started, modules imported
    started = time.perf_counter()
    count = frame().count()
    elapsed = time.perf_counter() - started
    spark.stop()
    return count, elapsed, session_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (CI smoke test)")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    args = parser.parse_args(argv)
    records = 20_000 if args.quick else 1_000_000
    work = Path(tempfile.mkdtemp(prefix="millrace-bench-spark-"))
    with sasl_broker(f"millrace_bench_spark_{os.getpid()}", work) as (_env, key, port):
        try:
            bootstrap = f"127.0.0.1:{port}"
            from confluent_kafka.admin import (  # type: ignore[attr-defined]
                AdminClient,
                NewTopic,
            )

            admin = AdminClient(_confluent(bootstrap, key))
            perf.create_topics(admin, [NewTopic(TOPIC, PARTITIONS, 1)])
            produce(bootstrap, key, records)
            own_count, own_s = read_with_own_client(bootstrap, key)
            confluent_s = read_with_confluent(bootstrap, key, records)
            count, spark_s, session_s = spark_count(bootstrap, key, records)
            if count != records or own_count != records:
                raise RuntimeError(f"read {count} (Spark) and {own_count} of {records} records")
            emit(
                "spark_batch_count",
                records=records,
                partitions=PARTITIONS,
                value_bytes=len(VALUE),
                records_per_s=round(records / spark_s),
                seconds=round(spark_s, 2),
                baseline_own_client_records_per_s=round(records / own_s),
                baseline_confluent_consumer_records_per_s=round(records / confluent_s),
                ratio_to_own_client=round(own_s / spark_s, 2),
                ratio_to_confluent=round(confluent_s / spark_s, 2),
                spark_session_start_s=round(session_s, 1),
                spark_master="local[2]",
                cpus=os.cpu_count(),
            )
        finally:
            if args.keep:
                print(f"logs in {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
