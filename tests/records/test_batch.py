"""RecordBatch v2: golden bytes, round trips, real clients' encoders as oracles, validation."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.records import (
    BATCH_HEADER_SIZE,
    Compression,
    InvalidRecordBatch,
    Record,
    RecordBatch,
    RecordHeader,
    TimestampType,
    iter_batches,
    read_header,
    set_base_offset,
    validate_batch,
)

TS = 1_700_000_000_000


def golden_batch() -> bytes:
    """One uncompressed batch built field by field from the protocol spec, not our encoder.

    Record: attributes 0, timestamp delta 0, offset delta 0, key "k", value "v", header
    ("h", "1"). Its body bytes, written out by hand (zig-zag varints):
      length 12 -> 0x18
      00 (attributes) 00 (ts delta) 00 (offset delta)
      02 6b (key len 1, "k")   02 76 (value len 1, "v")
      02 (1 header) 02 68 (key len 1, "h") 02 31 (value len 1, "1")
    """
    record = bytes.fromhex("18" "000000" "026b" "0276" "02" "0268" "0231")  # fmt: skip
    assert record[0] == 2 * (len(record) - 1)  # zig-zag(12) = 24 = 0x18
    after_crc = (
        struct.pack(">hiqqqhii", 0, 0, TS, TS, -1, -1, -1, 1) + record
    )  # attributes, last delta, base ts, max ts, pid, epoch, seq, count
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc) + after_crc


def test_golden_bytes_match_our_encoder():
    ours = RecordBatch(
        base_offset=0,
        records=(Record(0, TS, b"k", b"v", (RecordHeader("h", b"1"),)),),
    ).encode()
    assert ours.hex() == golden_batch().hex()
    assert len(ours) == BATCH_HEADER_SIZE + 13


def test_golden_bytes_match_kafka_python_builder():
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**20,
    )
    builder.append(0, timestamp=TS, key=b"k", value=b"v", headers=[("h", b"1")])
    built = bytes(builder.build())
    # kafka-python writes partition leader epoch 0 where Java writes -1 (no epoch); the
    # field is outside the CRC and the broker overwrites it. Everything else is identical.
    assert built[12:16] == b"\x00\x00\x00\x00"
    assert bytes(set_base_offset(built, 0, leader_epoch=-1)).hex() == golden_batch().hex()


records_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2**20),  # timestamp delta
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=200)),
        st.lists(
            st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    base_offset=st.integers(min_value=0, max_value=2**62),
    rows=records_strategy,
    codec=st.sampled_from(list(Compression)),
    log_append=st.booleans(),
    producer=st.tuples(
        st.integers(min_value=-1, max_value=2**40),
        st.integers(min_value=-1, max_value=2**15 - 1),
        st.integers(min_value=-1, max_value=2**30),
    ),
)
def test_round_trip_every_field(base_offset, rows, codec, log_append, producer):
    records = tuple(
        Record(
            offset=base_offset + i,
            timestamp=TS + ts,
            key=key,
            value=value,
            headers=tuple(RecordHeader(k, v) for k, v in headers),
        )
        for i, (ts, key, value, headers) in enumerate(rows)
    )
    batch = RecordBatch(
        base_offset=base_offset,
        records=records,
        partition_leader_epoch=7,
        compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
    )
    raw = batch.encode()
    header = validate_batch(raw)
    assert header.records_count == len(records)
    assert header.last_offset == records[-1].offset
    assert header.max_timestamp == max(r.timestamp for r in records)
    decoded = RecordBatch.decode(raw)
    assert decoded.records == records
    assert decoded.compression is codec
    assert decoded.timestamp_type == batch.timestamp_type
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == producer
    assert decoded.partition_leader_epoch == 7


def test_transactional_and_control_bits_round_trip():
    raw = RecordBatch(
        base_offset=5,
        records=(Record(5, TS, b"\x00\x00\x00\x00", b""),),
        is_transactional=True,
        is_control=True,
        producer_id=9,
        producer_epoch=1,
    ).encode()
    header = read_header(raw)
    assert header.is_transactional and header.is_control
    decoded = RecordBatch.decode(raw)
    assert decoded.is_transactional and decoded.is_control


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_real_client_batches_decode(client, codec):
    builder = _client_builder(client, codec)
    expected = []
    for i in range(50):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = (f"value-{i}-" * (i % 7 + 1)).encode()
        headers = [("trace", f"{i}".encode()), ("empty", None)] if i % 3 == 0 else []
        builder.append(i, timestamp=TS + i, key=key, value=value, headers=headers)
        expected.append((i, TS + i, key, value, tuple(RecordHeader(k, v) for k, v in headers)))
    raw = bytes(builder.build())
    header = validate_batch(raw)
    assert header.compression is codec and header.records_count == 50
    decoded = RecordBatch.decode(raw)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == expected


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_real_clients_decode_our_batches(client, codec):
    records = tuple(
        Record(100 + i, TS + i, f"k{i}".encode(), b"x" * i, (RecordHeader("h", b"v"),))
        for i in range(40)
    )
    raw = RecordBatch(base_offset=100, records=records, compression=codec).encode()
    if client == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatch
    else:
        from aiokafka.record.default_records import DefaultRecordBatch
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(r.offset, r.timestamp, r.key, r.value, [("h", b"v")]) for r in records]


def _client_builder(client, codec):
    if client == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder
    else:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**24,
    )


def test_snappy_reads_raw_blocks_as_librdkafka_may_write_them():
    import cramjam

    from data_plane.records.compression import decompress

    data = b"hello " * 1000
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw, max_size=10**6) == data


def test_set_base_offset_keeps_crc_valid():
    raw = golden_batch()
    moved = set_base_offset(raw, 12345, leader_epoch=3)
    header = validate_batch(moved)
    assert header.base_offset == 12345 and header.partition_leader_epoch == 3
    assert RecordBatch.decode(bytes(moved)).records[0].offset == 12345


def test_iter_batches_walks_a_buffer():
    a = RecordBatch(
        base_offset=0, records=(Record(0, TS, None, b"a"), Record(1, TS, None, b"b"))
    ).encode()
    b = RecordBatch(base_offset=2, records=(Record(2, TS, None, b"c"),)).encode()
    assert [h.base_offset for h in iter_batches(a + b)] == [0, 2]


# --- rejection --------------------------------------------------------------------------------


def _patch(raw: bytes, offset: int, fmt: str, value: int, *, fix_crc: bool = False) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, offset, value)
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda r: r[:-1], "truncated"),
        (lambda r: r[:30], "truncated"),
        (lambda r: r[:20] + bytes([r[20] ^ 0xFF]) + r[21:], "bad_crc"),
        (lambda r: r[:-1] + bytes([r[-1] ^ 1]), "bad_crc"),
        (lambda r: _patch(r, 16, ">b", 1), "bad_magic"),
        (lambda r: _patch(r, 8, ">i", 10), "bad_length"),
        (lambda r: _patch(r, 8, ">i", 2**31 - 1), "truncated"),
        (lambda r: _patch(r, 57, ">i", 3, fix_crc=True), "bad_count"),
        (lambda r: _patch(r, 57, ">i", -1, fix_crc=True), "bad_count"),
        (lambda r: _patch(r, 23, ">i", -4, fix_crc=True), "bad_count"),
    ],
)
def test_bad_batches_are_rejected_with_a_reason(mutate, reason):
    with pytest.raises(InvalidRecordBatch) as info:
        validate_batch(mutate(golden_batch()))
    assert info.value.reason == reason


def test_record_count_not_matching_the_bytes_is_rejected_on_decode():
    two = RecordBatch(
        base_offset=0, records=(Record(0, TS, None, b"a"), Record(1, TS, None, b"b"))
    ).encode()
    one_claimed = _patch(two, 57, ">i", 1, fix_crc=True)
    with pytest.raises(InvalidRecordBatch) as info:
        RecordBatch.decode(one_claimed)
    assert info.value.reason == "bad_count"


def test_corrupt_compressed_payload_is_rejected():
    raw = bytearray(
        RecordBatch(
            base_offset=0, records=(Record(0, TS, None, b"a" * 100),), compression=Compression.ZSTD
        ).encode()
    )
    raw[BATCH_HEADER_SIZE + 4] ^= 0xFF
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    with pytest.raises(InvalidRecordBatch) as info:
        RecordBatch.decode(bytes(raw))
    assert info.value.reason == "bad_compression"


def test_decompression_size_limit():
    raw = RecordBatch(
        base_offset=0,
        records=(Record(0, TS, None, b"\x00" * 100_000),),
        compression=Compression.GZIP,
    ).encode()
    assert len(raw) < 1000
    with pytest.raises(InvalidRecordBatch) as info:
        RecordBatch.decode(raw, max_uncompressed=50_000)
    assert info.value.reason == "bad_compression"
