"""Batch reads with the `millrace` data source in a local Spark session, against a broker."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db

# Recent: records older than the topic's retention (7 days) may be deleted under the test.
BASE_MS = (int(time.time()) // 60 - 60) * 60_000


@pytest.fixture(scope="module")
def orders(kafka):
    """3 partitions x 20 records with keys, headers and timestamps 1 s apart."""
    name = topic_name("spark")
    confluent_create(kafka, kafka.admin_a, name, partitions=3)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for i in range(60):
        producer.produce(
            name,
            key=f"k{i}".encode(),
            value=json.dumps({"n": i}).encode(),
            partition=i % 3,
            timestamp=BASE_MS + i * 1000,
            headers=[("trace", f"t{i}".encode())],
        )
    assert producer.flush(20) == 0
    return name


def read(spark, kafka, key, **options):
    reader = (
        spark.read.format("millrace")
        .option("bootstrap.servers", kafka.bootstrap)
        .option("api.key", key.key_id)
        .option("api.secret", key.secret)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_returns_exactly_the_records_in_kafkas_columns(spark, kafka, orders):
    df = read(spark, kafka, kafka.admin_a, subscribe=orders)
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert df.rdd.getNumPartitions() == 3  # one Spark partition per topic partition
    rows = df.collect()
    assert len(rows) == 60
    by_n = {json.loads(r.value)["n"]: r for r in rows}
    assert sorted(by_n) == list(range(60))
    r = by_n[7]
    assert bytes(r.key) == b"k7" and r.topic == orders and r.partition == 1 and r.offset == 2
    assert r.timestamp.replace(tzinfo=UTC) == datetime.fromtimestamp((BASE_MS + 7000) / 1000, UTC)
    assert r.timestampType == 0
    assert [(h.key, bytes(h.value)) for h in r.headers] == [("trace", b"t7")]


def test_offsets_and_timestamps_bound_a_read(spark, kafka, orders):
    some = read(
        spark,
        kafka,
        kafka.admin_a,
        assign=json.dumps({orders: [0, 2]}),
        startingOffsets=json.dumps({orders: {"0": 5, "2": -2}}),
        endingOffsets=json.dumps({orders: {"0": 8, "2": 3}}),
    )
    got = sorted((r.partition, r.offset) for r in some.collect())
    assert got == [(0, 5), (0, 6), (0, 7), (2, 0), (2, 1), (2, 2)]
    window = read(
        spark,
        kafka,
        kafka.admin_a,
        subscribe=orders,
        startingTimestamp=str(BASE_MS + 10_000),
        endingTimestamp=str(BASE_MS + 20_000),
    )
    assert sorted(json.loads(r.value)["n"] for r in window.collect()) == list(range(10, 20))


def test_wrong_secret_missing_acl_and_other_tenant_fail_clearly(spark, kafka, orders):
    from dataclasses import replace

    wrong = replace(kafka.admin_a, secret="not-the-secret")
    with pytest.raises(Exception, match=f"refused API key {kafka.admin_a.key_id}"):
        read(spark, kafka, wrong, subscribe=orders).collect()
    # reader_a may read topics starting "shared-" only.
    with pytest.raises(Exception, match="may not read topic"):
        read(spark, kafka, kafka.reader_a, subscribe=orders).collect()
    # Tenant B's key does not see tenant A's topic at all.
    with pytest.raises(Exception, match="does not exist"):
        read(spark, kafka, kafka.admin_b, subscribe=orders).collect()
    with pytest.raises(Exception, match="give one of 'subscribe'"):
        read(spark, kafka, kafka.admin_a).collect()


def test_credentials_from_a_file_and_never_in_the_plan(spark, kafka, orders, tmp_path):
    path = tmp_path / "key.json"
    path.write_text(json.dumps({"key_id": kafka.admin_a.key_id, "secret": kafka.admin_a.secret}))
    df = (
        spark.read.format("millrace")
        .option("bootstrap.servers", kafka.bootstrap)
        .option("credentials.file", str(path))
        .option("subscribe", orders)
        .load()
    )
    assert df.count() == 60
    assert kafka.admin_a.secret not in df._jdf.queryExecution().toString()
    # Given as an option, Spark redacts it (its option names matching "secret").
    given = read(spark, kafka, kafka.admin_a, subscribe=orders)
    assert kafka.admin_a.secret not in given._jdf.queryExecution().toString()


def test_a_batch_read_takes_committed_records_unless_told(spark, kafka):
    """Transactions in the topic: by default (read_committed) the aborted records and the
    markers are left out and the read ends at the last stable offset; with
    isolation.level=read_uncommitted every record is read."""
    name = topic_name("spark-tx")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    conf = confluent_conf(kafka, kafka.admin_a)
    for tid, values, commit in (("a", [b"c1", b"c2"], True), ("b", [b"x1"], False)):
        p = Producer({**conf, "transactional.id": f"{name}-{tid}"})
        p.init_transactions(30)
        p.begin_transaction()
        for v in values:
            p.produce(name, v, partition=0)
        p.flush(30)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    plain = Producer(conf)
    plain.produce(name, b"c3", partition=0)
    assert plain.flush(20) == 0
    committed = read(spark, kafka, kafka.admin_a, subscribe=name).collect()
    assert [bytes(r.value) for r in committed] == [b"c1", b"c2", b"c3"]
    everything = read(
        spark, kafka, kafka.admin_a, subscribe=name, **{"isolation.level": "read_uncommitted"}
    ).collect()
    assert [bytes(r.value) for r in everything] == [b"c1", b"c2", b"x1", b"c3"]
    with pytest.raises(Exception, match=r"isolation\.level"):
        read(spark, kafka, kafka.admin_a, subscribe=name, **{"isolation.level": "x"}).collect()
