"""The message browser's scan (frontend.scan) against a real broker: records produced by
confluent-kafka with every compression codec, read back by the scan and by a
confluent-kafka consumer with the filter written out again here (the oracle); the same
rows must match. Also: fair interleaving of equal timestamps across partitions, and a
scan that read exactly everything offers nothing more."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from data_plane.client import ClusterClient
from data_plane.records.batch import read_header
from frontend.scan import Query, interleave, scan
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
PER_PARTITION = 400


def _record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    key = None if i % 13 == 0 else f"user-{i % 50}".encode()
    value = f'{{"n": {i}, "tag": "{"needle" if i % 97 == 5 else "hay"}"}}'.encode()
    if i % 41 == 0:
        value = None
    elif i % 43 == 0:
        value = bytes([0, 255, i % 256])
    headers: list[tuple[str, bytes | None]] = [("trace", f"t{i}".encode())]
    if i % 89 == 3:
        headers.append(("needle-in-name", None))
    if i % 83 == 7:
        headers.append(("h", b"a needle in a header"))
    return key, value, headers


@pytest.fixture(scope="module")
def reader(kafka):
    host, port = kafka.bootstrap.split(",")[0].split(":")
    with ClusterClient(
        [(host, int(port))], username=kafka.admin_a.key_id, password=kafka.admin_a.secret
    ) as c:
        yield c


@pytest.fixture(scope="module")
def topics(kafka):
    """One topic per codec, PARTITIONS x PER_PARTITION records in batches of many."""
    names = {}
    for codec in CODECS:
        name = topic_name(f"scan-{codec}")
        confluent_create(kafka, kafka.admin_a, name, partitions=PARTITIONS)
        producer = Producer(
            confluent_conf(
                kafka,
                kafka.admin_a,
                **{"compression.type": codec, "linger.ms": 50, "batch.num.messages": 150},
            )
        )
        for i in range(PARTITIONS * PER_PARTITION):
            key, value, headers = _record(i)
            producer.produce(name, key=key, value=value, headers=headers, partition=i % 3)
        assert producer.flush(30) == 0
        names[codec] = name
    return names


@pytest.fixture(scope="module")
def everything(kafka, topics):
    """Per codec, every record as librdkafka reads it: {(partition, offset): fields}."""
    return {codec: _read_all(kafka, name) for codec, name in topics.items()}


def _read_all(kafka, topic: str) -> dict[tuple[int, int], tuple]:
    consumer = Consumer(
        confluent_conf(kafka, kafka.admin_a, **{"group.id": "oracle", "enable.auto.commit": False})
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = {}
    try:
        for _ in range(100):
            for m in consumer.consume(1000, timeout=1):
                assert m.error() is None
                headers = [(k, v) for k, v in (m.headers() or [])]
                out[(m.partition(), m.offset())] = (m.key(), m.value(), headers)
            if len(out) >= PARTITIONS * PER_PARTITION:
                break
    finally:
        consumer.close()
    assert len(out) == PARTITIONS * PER_PARTITION
    return out


def _oracle(records: dict[tuple[int, int], tuple], key: bytes, text: bytes):
    """The browser's filter rules written out again."""
    return {
        where: (k, v, headers)
        for where, (k, v, headers) in records.items()
        if (not key or key in (k or b""))
        and (
            not text
            or text in (v or b"")
            or any(text in name.encode() or text in (data or b"") for name, data in headers)
        )
    }


def _rows(result) -> dict[tuple[int, int], tuple]:
    return {
        (r.partition, r.offset): (
            r.record.key,
            r.record.value,
            [(h.key, h.value) for h in r.record.headers],
        )
        for r in result.rows
    }


@pytest.mark.parametrize("codec", CODECS)
def test_the_scan_matches_the_same_rows_as_a_full_decode(reader, topics, everything, codec):
    topic = topics[codec]
    total = PARTITIONS * PER_PARTITION
    # The records really are in compressed batches of many.
    first = read_header(reader.fetch((topic, 0), 0, max_bytes=1 << 20).records)
    assert first.compression.name.lower() == codec and first.records_count > 1
    for key, text in [(b"", b"needle"), (b"user-7", b""), (b"user-3", b"needle"), (b"", b"")]:
        expected = _oracle(everything[codec], key, text)
        assert expected or not (key or text) or key == b"user-3"
        for position in ("earliest", "newest"):
            q = Query(
                position=position, key=key.decode(), text=text.decode(), limit=500, scan=total
            )
            result = scan(reader, topic, q, list(range(PARTITIONS)))
            assert result.scanned == total
            if len(expected) <= 500:
                assert _rows(result) == expected, (codec, key, text, position)
                assert result.resume == "" and result.limited_by is None
            else:  # unfiltered: the newest / oldest 500 of them
                assert len(result.rows) == 500 and set(_rows(result)) <= set(expected)


def test_equal_timestamps_take_turns_across_partitions(kafka, reader):
    topic = topic_name("scan-ties")
    confluent_create(kafka, kafka.admin_a, topic, partitions=3)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    stamp = 1_700_000_000_000
    for partition, count in ((0, 30), (1, 4), (2, 4)):
        for i in range(count):
            producer.produce(
                topic, value=b"%d-%d" % (partition, i), partition=partition, timestamp=stamp
            )
    assert producer.flush(20) == 0
    newest = scan(reader, topic, Query(position="newest", limit=6), [0, 1, 2])
    assert [(r.partition, r.offset) for r in newest.rows] == [
        (0, 29),
        (1, 3),
        (2, 3),
        (0, 28),
        (1, 2),
        (2, 2),
    ]
    earliest = scan(reader, topic, Query(position="earliest", limit=6), [0, 1, 2])
    assert [(r.partition, r.offset) for r in earliest.rows] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (0, 1),
        (1, 1),
        (2, 1),
    ]


def test_interleave_orders_by_time_first():
    from data_plane.records.batch import Record
    from frontend.scan import Row

    rows = [
        Row(p, Record(o, ts, None, None), ts, False)
        for p, o, ts in [(0, 0, 5), (0, 1, 5), (0, 2, 9), (1, 0, 5), (1, 1, 7)]
    ]
    got = [(r.partition, r.offset) for r in interleave(rows, newest_first=True)]
    assert got == [(0, 2), (1, 1), (0, 1), (1, 0), (0, 0)]


def test_a_scan_that_read_exactly_everything_offers_no_more(kafka, reader, topics):
    topic = topics["none"]
    total = PARTITIONS * PER_PARTITION
    for position in ("earliest", "newest"):
        result = scan(
            reader, topic, Query(position=position, text="nowhere", scan=total), [0, 1, 2]
        )
        assert result.scanned == total
        assert result.limited_by is None and result.resume == ""
        short = scan(
            reader, topic, Query(position=position, text="nowhere", scan=total - 1), [0, 1, 2]
        )
        assert short.limited_by == "scan" and short.resume


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_many_small_windows_and_fetches_read_the_same_rows(
    reader, topics, everything, codec, monkeypatch
):
    """Windows that straddle batches and fetches that hold one batch each, both ways."""
    from frontend import scan as scan_module

    monkeypatch.setattr(scan_module, "WINDOW", 37)
    for name in ("FETCH_BYTES", "MIN_FETCH_BYTES", "MAX_FETCH_BYTES"):
        monkeypatch.setattr(scan_module, name, 2048)
    total = PARTITIONS * PER_PARTITION
    expected = _oracle(everything[codec], b"", b"needle")
    for position in ("earliest", "newest"):
        q = Query(position=position, text="needle", limit=500, scan=total)
        result = scan(reader, topics[codec], q, list(range(PARTITIONS)))
        assert result.scanned == total and _rows(result) == expected
    # Unfiltered, newest: exactly the newest records of each partition, none twice.
    q = Query(position="newest", limit=500, scan=3 * 37 * PARTITIONS)
    result = scan(reader, topics[codec], q, list(range(PARTITIONS)))
    assert sorted(_rows(result)) == sorted(
        (p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION - 3 * 37, PER_PARTITION)
    )
