"""Batch and streaming writes with the `millrace` data source: records land with keys,
headers and partitions intact (acks=all), and refusals say why."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql import Row

from tests.broker.test_clients import confluent_create, topic_name
from tests.spark.test_batch import read

pytestmark = pytest.mark.django_db


def writer(df, kafka, key, **options):
    w = (
        df.write.format("millrace")
        .mode("append")
        .option("bootstrap.servers", kafka.bootstrap)
        .option("api.key", key.key_id)
        .option("api.secret", key.secret)
    )
    for name, value in options.items():
        w = w.option(name, value)
    return w


def test_batch_write_keeps_keys_headers_and_partitions(spark, kafka):
    topic = topic_name("sink")
    confluent_create(kafka, kafka.admin_a, topic, partitions=2)
    rows = [
        Row(key=f"k{i}".encode(), value=f"v{i}", partition=i % 2, headers=[("src", b"spark")])
        for i in range(40)
    ]
    df = spark.createDataFrame(
        rows,
        "key binary, value string, partition int, headers array<struct<key:string,value:binary>>",
    ).repartition(3)
    writer(df, kafka, kafka.admin_a, topic=topic).save()
    back = read(spark, kafka, kafka.admin_a, subscribe=topic).collect()
    assert len(back) == 40
    by_value = {bytes(r.value).decode(): r for r in back}
    assert set(by_value) == {f"v{i}" for i in range(40)}
    r = by_value["v13"]
    assert bytes(r.key) == b"k13" and r.partition == 1
    assert [(h.key, bytes(h.value)) for h in r.headers] == [("src", b"spark")]


def test_streaming_write_from_a_stream(spark, kafka, tmp_path):
    source, target = topic_name("src"), topic_name("dst")
    confluent_create(kafka, kafka.admin_a, source, partitions=2)
    confluent_create(kafka, kafka.admin_a, target, partitions=2)
    seed = spark.createDataFrame(
        [Row(key=f"u{i % 4}".encode(), value=json.dumps({"n": i}).encode()) for i in range(25)]
    )
    writer(seed, kafka, kafka.admin_a, topic=source).save()
    query = (
        spark.readStream.format("millrace")
        .option("bootstrap.servers", kafka.bootstrap)
        .option("api.key", kafka.admin_a.key_id)
        .option("api.secret", kafka.admin_a.secret)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value", "headers")
        .writeStream.format("millrace")
        .option("bootstrap.servers", kafka.bootstrap)
        .option("api.key", kafka.admin_a.key_id)
        .option("api.secret", kafka.admin_a.secret)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copied = read(spark, kafka, kafka.admin_a, subscribe=target).collect()
    assert sorted(json.loads(r.value)["n"] for r in copied) == list(range(25))
    assert {bytes(r.key) for r in copied} == {b"u0", b"u1", b"u2", b"u3"}


def test_writes_refused_with_reasons(spark, kafka):
    topic = topic_name("nowrite")
    confluent_create(kafka, kafka.admin_a, topic, partitions=1)
    df = spark.createDataFrame([Row(value=b"x")])
    with pytest.raises(Exception, match="may not write"):
        writer(df, kafka, kafka.reader_a, topic=topic).save()
    with pytest.raises(Exception, match="append-only"):
        writer(df, kafka, kafka.admin_a, topic=topic).mode("overwrite").save()
    with pytest.raises(Exception, match="needs a 'value' column"):
        writer(spark.range(3), kafka, kafka.admin_a, topic=topic).save()
    assert read(spark, kafka, kafka.admin_a, subscribe=topic).count() == 0


def test_a_key_that_may_write_nothing_is_told_so_whichever_refusal_comes_first(kafka):
    """The read-only key's idempotent producer gets no producer id (KIP-679: no Write on
    any topic), which fails the producer whole before any record is answered; that, or
    the topic's own refusal, reads as the same clear reason (not "the key was revoked")."""
    from data_plane.spark.options import write_settings
    from data_plane.spark.source import MillraceError, write_rows

    topic = topic_name("nowrite-direct")
    confluent_create(kafka, kafka.admin_a, topic, partitions=1)
    reader = kafka.reader_a
    options = {"bootstrap.servers": kafka.bootstrap, "api.key": reader.key_id,
               "api.secret": reader.secret, "topic": topic, "timeout.seconds": "20"}  # fmt: skip

    def rows(wait: float):  # the first row after ``wait``: by then the producer id was refused
        time.sleep(wait)
        yield from [Row(value=b"x")] * 5

    for wait in (0, 3):  # the topic's refusal first, then the producer id's
        with pytest.raises(MillraceError, match="may not write to the topic"):
            write_rows(write_settings(options), rows(wait))
