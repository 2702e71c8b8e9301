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


# --- transactions (Step 13) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def transactional(kafka):
    """Partition 0: a committed transaction (c0-c4), an aborted one (a0-a4), another
    committed one (c5-c9), then an open one (o0-o2) and a plain record after it (n0).
    Partition 1: plain records p0-p2, then an aborted transaction (x0, x1). The open
    transaction is aborted when the module's tests are done."""
    name = topic_name("scan-txn")
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    txn = Producer(confluent_conf(kafka, kafka.admin_a, **{"transactional.id": f"scan-{name}"}))
    plain = Producer(confluent_conf(kafka, kafka.admin_a))
    txn.init_transactions(30)

    def send(producer, values, partition=0):
        for v in values:
            producer.produce(name, key=v.encode(), value=v.encode(), partition=partition)
        producer.flush(30)

    for v in ("p0", "p1", "p2"):
        plain.produce(name, value=v.encode(), partition=1)
    plain.flush(30)
    for values, commit in (
        ([f"c{i}" for i in range(5)], True),
        ([f"a{i}" for i in range(5)], False),
        ([f"c{i}" for i in range(5, 10)], True),
    ):
        txn.begin_transaction()
        send(txn, values)
        if values[0] == "a0":
            send(txn, ["x0", "x1"], partition=1)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    txn.begin_transaction()
    send(txn, ["o0", "o1", "o2"])
    send(plain, ["n0"])
    yield name
    txn.abort_transaction(30)


@pytest.mark.parametrize("window", [500, 2])
def test_the_browser_reads_as_read_committed_and_hides_aborted_records(
    kafka, reader, transactional, window, monkeypatch
):
    from frontend import scan as scan_module

    monkeypatch.setattr(scan_module, "WINDOW", window)
    committed = [f"c{i}" for i in range(10)]
    for position in ("earliest", "newest"):
        result = scan(reader, transactional, Query(position=position, limit=100), [0])
        got = [r.record.value.decode() for r in result.rows]
        assert got == (committed if position == "earliest" else committed[::-1])
        assert {r.state for r in result.rows} == {""}
        assert result.hidden_aborted == 5
        assert result.hidden_markers == 3
        assert result.partitions[0].end == 18  # the open transaction's first offset
        assert result.scanned == 15  # the aborted records count as read
    both = scan(reader, transactional, Query(position="earliest", limit=100), [0, 1])
    assert sorted(r.record.value.decode() for r in both.rows if r.partition == 1) == [
        "p0",
        "p1",
        "p2",
    ]
    # The oracle: a read_committed consumer stops at the same place, with the same records.
    consumer = Consumer(
        confluent_conf(
            kafka,
            kafka.admin_a,
            **{"group.id": "scan-oracle", "isolation.level": "read_committed"},
        )
    )
    consumer.assign([TopicPartition(transactional, 0, 0)])
    seen = []
    for _ in range(40):
        msg = consumer.poll(0.25)
        if msg is not None and msg.error() is None:
            seen.append(msg.value().decode())
    consumer.close()
    assert seen == committed


def test_the_browser_marks_aborted_records_markers_and_the_unstable_tail(reader, transactional):
    result = scan(
        reader, transactional, Query(position="earliest", limit=100, transactions=True), [0]
    )
    states = [
        (r.offset, r.record.value.decode() if r.state not in ("commit", "abort") else "-", r.state)
        for r in result.rows
    ]
    expected = (
        [(i, f"c{i}", "") for i in range(5)]
        + [(5, "-", "commit")]
        + [(6 + i, f"a{i}", "aborted") for i in range(5)]
        + [(11, "-", "abort")]
        + [(12 + i, f"c{5 + i}", "") for i in range(5)]
        + [(17, "-", "commit")]
        + [(18 + i, f"o{i}", "unstable") for i in range(3)]
        + [(21, "n0", "unstable")]
    )
    assert states == expected
    assert result.hidden_aborted == result.hidden_markers == 0
    producers = {r.producer_id for r in result.rows if r.state != "unstable" or r.offset < 21}
    assert len(producers) == 1 and producers != {-1}  # the transactional producer's id
    assert next(r for r in result.rows if r.offset == 21).producer_id == -1
    # Newest first, a few at a time: the same rows.
    newest = scan(
        reader,
        transactional,
        Query(position="newest", limit=100, transactions=True),
        [0],
    )
    assert [r.offset for r in newest.rows] == [o for o, _, _ in expected][::-1]
