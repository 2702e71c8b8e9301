"""Message formats v0/v1 up-converted to RecordBatch v2. The message sets are built by
aiokafka's own legacy encoder (an independent implementation), in every codec, and what
comes out is decoded with our RecordBatch reader and compared record by record."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.records import Record, RecordBatch
from data_plane.records.batch import InvalidRecordBatch, validate_batch
from data_plane.records.compression import Compression
from data_plane.records.legacy import up_convert

LIMIT = 1 << 20
CODECS = {0: Compression.NONE, 1: Compression.GZIP, 2: Compression.SNAPPY, 3: Compression.LZ4}
ROWS = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None), (b"k3", b"x" * 500)]


def legacy_set(magic: int, codec: int, rows=ROWS, t0: int = 1_700_000_000_000) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, LIMIT)
    for i, (key, value) in enumerate(rows):
        builder.append(i, timestamp=t0 + i if magic else None, key=key, value=value)
    return bytes(builder.build())


def kafka08_lz4_set(rows=ROWS, standard_checksum: bool = False) -> bytes:
    """A message set in format v0 whose one wrapper holds the rows in an LZ4 frame as
    Kafka 0.8/0.9 clients wrote it: the header checksum taken over the magic number and
    the descriptor (KAFKA-3160). aiokafka refuses to write LZ4 in format v0, so the frame
    comes from cramjam and the wrapper is packed here."""
    import zlib

    import cramjam

    from data_plane.records.legacy import xxh32_short

    frame = bytearray(cramjam.lz4.compress(legacy_set(0, 0, rows)))
    assert frame[4] & 0x09 == 0  # no content size, no dictionary id: descriptor is 2 bytes
    if not standard_checksum:
        frame[6] = (xxh32_short(bytes(frame[0:6])) >> 8) & 0xFF
    body = struct.pack(">bbi", 0, 3, -1) + struct.pack(">i", len(frame)) + bytes(frame)
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def test_xxh32_of_short_inputs_matches_the_specification_and_lz4_frames():
    import cramjam

    from data_plane.records.legacy import xxh32_short

    # Reference values of XXH32 with seed 0 (xxHash's own test vectors).
    assert xxh32_short(b"") == 0x02CC5D05
    assert xxh32_short(b"a") == 0x550D7456
    assert xxh32_short(b"abc") == 0x32D153FF
    frame = bytes(cramjam.lz4.compress(b"x" * 1000))  # a standard frame: its checksum
    assert frame[6] == (xxh32_short(frame[4:6]) >> 8) & 0xFF


def test_kafka08_lz4_frames_decode_and_standard_ones_too():
    broken = kafka08_lz4_set()
    standard = kafka08_lz4_set(standard_checksum=True)
    assert broken != standard  # the checksums differ: the case is real
    for data in (broken, standard):
        batch = RecordBatch.decode(up_convert(data, max_size=LIMIT))
        assert [(r.key, r.value) for r in batch.records] == ROWS
        assert batch.compression is Compression.LZ4


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_every_message_becomes_a_record_of_one_batch(magic, codec):
    data = kafka08_lz4_set() if magic == 0 and codec == 3 else legacy_set(magic, codec)
    out = up_convert(data, max_size=LIMIT)
    validate_batch(out)  # a well-formed v2 batch: sizes, magic 2, CRC-32C
    batch = RecordBatch.decode(out)
    assert batch.compression is CODECS[codec]  # the producer's codec is kept
    assert [(r.key, r.value) for r in batch.records] == ROWS
    assert [r.offset for r in batch.records] == [0, 1, 2, 3]
    expected = [1_700_000_000_000 + i for i in range(4)] if magic else [-1] * 4
    assert [r.timestamp for r in batch.records] == expected


def test_several_compressed_wrappers_in_one_set_keep_their_order():
    data = legacy_set(1, 1, ROWS[:2]) + legacy_set(1, 1, ROWS[2:], t0=1_700_000_000_100)
    batch = RecordBatch.decode(up_convert(data, max_size=LIMIT))
    assert [(r.key, r.value) for r in batch.records] == ROWS


def test_a_log_append_time_wrapper_gives_its_timestamp_to_every_record():
    data = bytearray(legacy_set(1, 1))
    # The wrapper's attributes (after offset 8, size 4, crc 4, magic 1): set bit 3, then
    # recompute the CRC over magic..value, as a broker that stamped it would.
    data[17] |= 0x08
    struct.pack_into(">q", data, 18, 1_800_000_000_000)
    import zlib

    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    batch = RecordBatch.decode(up_convert(bytes(data), max_size=LIMIT))
    assert {r.timestamp for r in batch.records} == {1_800_000_000_000}


@pytest.mark.parametrize(
    "mangle,reason",
    [
        (lambda d: d[:-1], "bad_length"),  # truncated message
        (lambda d: d[:10], "truncated"),  # truncated entry
        (lambda d: d[:16] + bytes([d[16] ^ 0xFF]) + d[17:], "bad_crc"),  # magic flipped
        (lambda d: b"", "empty"),
    ],
)
def test_malformed_sets_are_refused_whole(mangle, reason):
    with pytest.raises(InvalidRecordBatch) as refused:
        up_convert(mangle(legacy_set(1, 0)), max_size=LIMIT)
    assert refused.value.reason == reason


def test_a_compressed_message_expanding_past_the_limit_is_refused():
    data = legacy_set(1, 1, [(None, b"z" * 100_000)])
    with pytest.raises(InvalidRecordBatch) as refused:
        up_convert(data, max_size=10_000)
    assert refused.value.reason == "bad_compression"


def _read_with_aiokafka(data: bytes) -> list[tuple]:
    """(offset, timestamp, key, value, magic) of every message: aiokafka's own reader for
    the old formats, and the magic byte of each entry (after offset, size and CRC)."""
    from aiokafka.record.memory_records import MemoryRecords

    magics = []
    pos = 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        magics.append(data[pos + 16])
        pos += 12 + size
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        for r in records.next_batch():
            out.append((r.offset, r.timestamp, r.key, r.value))
    assert len(out) == len(magics)
    return [(*row, magic) for row, magic in zip(out, magics, strict=True)]


def _stored(base: int, timestamp_type=None, compression=Compression.NONE) -> bytes:
    from data_plane.records.batch import RecordHeader, TimestampType

    records = tuple(
        Record(
            offset=base + i,
            timestamp=1_700_000_000_000 + i,
            key=key,
            value=value,
            headers=(RecordHeader("h", b"dropped"),),
        )
        for i, (key, value) in enumerate(ROWS)
    )
    return RecordBatch(
        base_offset=base,
        records=records,
        compression=compression,
        timestamp_type=timestamp_type or TimestampType.CREATE_TIME,
    ).encode()


@pytest.mark.parametrize("magic", [0, 1])
def test_down_conversion_writes_each_record_at_its_offset(magic):
    from data_plane.records.legacy import down_convert

    stored = _stored(10, compression=Compression.GZIP) + _stored(14)
    got = _read_with_aiokafka(down_convert(stored, magic, first_offset=12))
    assert [o for o, *_ in got] == list(range(12, 18))  # from the offset asked for
    assert [(k, v) for _, _, k, v, _ in got] == (ROWS[2:] + ROWS)
    assert {m for *_, m in got} == {magic}
    expected = [1_700_000_000_002, 1_700_000_000_003, *range(1_700_000_000_000, 1_700_000_000_004)]
    assert [t for _, t, *_ in got] == (expected if magic else [None] * 6)


def test_down_conversion_keeps_log_append_time_in_format_v1():
    from data_plane.records.batch import TimestampType
    from data_plane.records.legacy import down_convert

    stored = bytearray(_stored(0, TimestampType.LOG_APPEND_TIME))
    got = _read_with_aiokafka(down_convert(bytes(stored), 1, first_offset=0))
    assert {t for _, t, *_ in got} == {1_700_000_000_003}  # the batch's (max) timestamp


def test_up_then_down_conversion_gives_the_producers_messages_back():
    from data_plane.records.legacy import down_convert

    stored = up_convert(legacy_set(1, 2), max_size=LIMIT)  # snappy, format v1
    got = _read_with_aiokafka(down_convert(stored, 1, first_offset=0))
    assert [(k, v) for _, _, k, v, _ in got] == ROWS
    assert [t for _, t, *_ in got] == [1_700_000_000_000 + i for i in range(4)]


def _crc_ok(data: bytes) -> bool:
    import zlib

    pos = 0
    while pos < len(data):
        _, size, crc = struct.unpack_from(">qiI", data, pos)
        if zlib.crc32(data[pos + 16 : pos + 12 + size]) != crc:
            return False
        pos += 12 + size
    return pos == len(data)


_blob = st.one_of(st.none(), st.binary(max_size=300))


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(
                st.tuples(
                    _blob,
                    _blob,
                    st.integers(-(2**40), 2**40),  # timestamp delta: many-byte varints
                    st.integers(0, 3),  # gap to the next offset (compacted logs)
                    st.lists(st.tuples(st.text(max_size=5), _blob), max_size=2),
                ),
                min_size=1,
                max_size=8,
            ),
            st.sampled_from(list(Compression)),
            st.booleans(),  # log append time
            st.booleans(),  # a control batch follows
        ),
        min_size=1,
        max_size=4,
    ),
    magic=st.sampled_from([0, 1]),
    start=st.integers(0, 40),
    compiled=st.booleans(),
)
def test_down_conversion_matches_the_stored_records(batches, magic, start, compiled):
    """Any stored batches (many-byte varints, gaps, headers, every codec, control batches
    in between, log append time) come out as the records at or after ``start``, in
    order, each message's CRC-32 right, as aiokafka's reader sees them: through
    aiokafka's compiled codecs and through the pure-Python path alike."""
    from unittest import mock

    from data_plane.records import legacy

    assert legacy._COMPILED is not None  # the wheels CI installs ship them
    with mock.patch.object(legacy, "_COMPILED", legacy._COMPILED if compiled else None):
        _check_down_conversion(legacy.down_convert, batches, magic, start)


def _check_down_conversion(down_convert, batches, magic, start):
    from data_plane.records.batch import RecordHeader, TimestampType

    stored = bytearray()
    expected = []
    offset = 0
    t0 = 1_700_000_000_000
    for rows, codec, log_append, control in batches:
        records = []
        for key, value, delta, gap, headers in rows:
            records.append(
                Record(
                    offset=offset,
                    timestamp=t0 + delta,
                    key=key,
                    value=value,
                    headers=tuple(RecordHeader(k, v) for k, v in headers),
                )
            )
            offset += 1 + gap
        batch = RecordBatch(
            base_offset=records[0].offset,
            records=tuple(records),
            compression=codec,
            timestamp_type=(
                TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
            ),
        )
        stored += batch.encode()
        max_ts = max(r.timestamp for r in records)
        for r in records:
            if r.offset >= start:
                ts = (max_ts if log_append else r.timestamp) if magic else None
                expected.append((r.offset, ts, r.key, r.value, magic))
        if control:
            marker = RecordBatch(
                base_offset=offset,
                records=(Record(offset=offset, timestamp=t0, key=b"\0\0\0\0", value=b"\0" * 6),),
                is_control=True,
            )
            stored += marker.encode()
            offset += 1
    converted = down_convert(bytes(stored), magic, first_offset=start)
    assert _crc_ok(converted)
    assert _read_with_aiokafka(converted) == expected
