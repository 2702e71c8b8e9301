"""Example pipeline: JSON events in, per-key totals per time window out.

Reads a topic of JSON events (``{"user": "ann", "amount": 12.5}``) as a stream, adds up
``amount`` and counts events per record key in tumbling windows of the records'
timestamps, and writes one JSON record per (window, key) to another topic, keyed by the
key, once the window is complete (events arriving up to one window late still count).
Run it as docs/spark.md shows:

    MILLRACE_API_KEY=... MILLRACE_API_SECRET=... \\
    python -m data_plane.spark.examples.windowed_totals \\
        --bootstrap 127.0.0.1:9092 --source events --target totals --checkpoint /tmp/totals

(``spark-submit`` works the same with the file's path.) The API key's service account
needs READ on the source topic and WRITE on the target.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from data_plane.spark import MillraceDataSource

EVENT = "struct<user:string, amount:double>"


def totals(events: DataFrame, window: str) -> DataFrame:
    """Per key and window: the number of events and the sum of their amounts, as records."""
    parsed = events.select(
        F.col("key").cast("string").alias("key"),
        F.col("timestamp"),
        F.from_json(F.col("value").cast("string"), EVENT).alias("event"),
    )
    counted = (
        parsed.withWatermark("timestamp", window)
        .groupBy(F.window("timestamp", window).alias("window"), "key")
        .agg(F.count("*").alias("events"), F.sum("event.amount").alias("amount"))
    )
    return counted.select(
        F.col("key").cast("binary").alias("key"),
        F.to_json(
            F.struct(
                F.col("key"),
                F.col("window.start").alias("start"),
                F.col("window.end").alias("end"),
                "events",
                "amount",
            )
        )
        .cast("binary")
        .alias("value"),
    )


def start(
    spark: SparkSession,
    *,
    bootstrap: str,
    source: str,
    target: str,
    checkpoint: str,
    window: str = "1 minute",
    available_now: bool = False,
) -> StreamingQuery:
    spark.dataSource.register(MillraceDataSource)
    # Read in the driver and handed over as options, so executors need no environment of
    # their own; Spark redacts options named like "secret" in plans and its UI.
    credentials = {
        "api.key": os.environ["MILLRACE_API_KEY"],
        "api.secret": os.environ["MILLRACE_API_SECRET"],
    }
    events = (
        spark.readStream.format("millrace")
        .options(**credentials)
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    writer = (
        totals(events, window)
        .writeStream.format("millrace")
        # A window's total is written once, when the watermark (the latest event time
        # seen, less one window) has passed its end: late events up to a window late
        # still count, and every (window, key) is one record.
        .outputMode("append")
        .options(**credentials)
        .option("bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
    )
    writer = writer.trigger(availableNow=True) if available_now else writer
    return writer.start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="host:port[,host:port]")
    parser.add_argument("--source", required=True, help="topic of JSON events")
    parser.add_argument("--target", required=True, help="topic for the totals")
    parser.add_argument("--checkpoint", required=True, help="a directory the query owns")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        default=8,
        help="state partitions of the aggregation, unless Spark's own configuration sets "
        "spark.sql.shuffle.partitions (fixed by the checkpoint after the first run)",
    )
    parser.add_argument(
        "--available-now", action="store_true", help="process what is there, then stop"
    )
    args = parser.parse_args(argv)
    if not os.environ.get("MILLRACE_API_KEY") or not os.environ.get("MILLRACE_API_SECRET"):
        sys.exit("set MILLRACE_API_KEY and MILLRACE_API_SECRET to the service account's key")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName("millrace-windowed-totals").getOrCreate()
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        # Spark's default of 200 gives every micro-batch 200 state-store tasks and 200
        # writers, each with its own broker connection: minutes per batch on a laptop.
        spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    query = start(
        spark,
        bootstrap=args.bootstrap,
        source=args.source,
        target=args.target,
        checkpoint=args.checkpoint,
        window=args.window,
        available_now=args.available_now,
    )
    query.awaitTermination()
    print(summary(query.recentProgress, args.target))


def summary(progress: list[Any], target: str) -> str:
    """One line on what the query did, from its progress reports (micro-batches that ran
    since it started, up to Spark's ``numRecentProgressUpdates``, 100)."""
    events = sum(p.numInputRows for p in progress)
    batches = sum(1 for p in progress if p.numInputRows)
    written = sum(max(p.sink.numOutputRows, 0) for p in progress)
    return (
        f"windowed_totals: read {events} events in {batches} micro-batch(es); "
        f"wrote {written} totals to {target}"
    )


if __name__ == "__main__":
    main()
