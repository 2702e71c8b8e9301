"""Streaming reads with the `millrace` data source: offsets as Spark offsets, so a
checkpointed query stopped mid-stream and restarted processes every record once."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from data_plane.spark.source import limit_records
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db


def produce(kafka, topic, start, count):
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for i in range(start, start + count):
        producer.produce(topic, value=json.dumps({"n": i}).encode(), partition=i % 2)
    assert producer.flush(20) == 0


def test_the_read_limit_is_shared_between_partitions_and_exact():
    start = {("t", 0): 0, ("t", 1): 10}
    end = {("t", 0): 100, ("t", 1): 20, ("t", 2): 5}
    limited = limit_records(start, end, 23)
    assert sum(limited[tp] - start.get(tp, 0) for tp in end) == 23
    assert all(start.get(tp, 0) <= limited[tp] <= end[tp] for tp in end)
    assert limit_records(start, end, 1000) == end


def test_a_checkpointed_stream_restarts_where_it_stopped(spark, kafka, tmp_path):
    topic = topic_name("stream")
    confluent_create(kafka, kafka.admin_a, topic, partitions=2)
    produce(kafka, topic, 0, 30)
    sink, checkpoint = tmp_path / "sink", str(tmp_path / "checkpoint")
    sink.mkdir()

    def record(batch, batch_id):
        # Idempotent by batch id, as a foreachBatch sink must be: a batch run again after
        # a restart replaces its own file.
        rows = [
            {"partition": r.partition, "offset": r.offset, "n": json.loads(r.value)["n"]}
            for r in batch.collect()
        ]
        (sink / f"batch-{batch_id}.json").write_text(json.dumps(rows))

    def start(trigger):
        return (
            spark.readStream.format("millrace")
            .option("bootstrap.servers", kafka.bootstrap)
            .option("api.key", kafka.admin_a.key_id)
            .option("api.secret", kafka.admin_a.secret)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "6")
            .load()
            .writeStream.foreachBatch(record)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "200 milliseconds"})
    deadline = time.monotonic() + 60
    while len(list(sink.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()  # mid-stream: 30 records at 6 per trigger take 5 batches
    first_run = len(list(sink.iterdir()))
    assert 2 <= first_run < 5

    produce(kafka, topic, 30, 20)
    again = start({"availableNow": True})
    again.awaitTermination(120)
    assert again.exception() is None

    batches = [json.loads(p.read_text()) for p in sorted(sink.iterdir())]
    assert all(len(b) <= 6 for b in batches)
    seen = [(r["partition"], r["offset"]) for b in batches for r in b]
    assert len(seen) == len(set(seen)) == 50  # every record once: no loss, no duplicate
    assert sorted(r["n"] for b in batches for r in b) == list(range(50))
