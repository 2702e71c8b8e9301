"""RecordBatch v2 encode/decode and the cheap validation the append path uses.

Layout (big-endian), 61-byte header then records::

    0  base_offset            int64
    8  batch_length           int32   bytes after this field (total size - 12)
    12 partition_leader_epoch int32
    16 magic                  int8    = 2
    17 crc                    uint32  CRC-32C of bytes [21, end)
    21 attributes             int16   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                      5 control, 6 has delete horizon
    23 last_offset_delta      int32
    27 base_timestamp         int64
    35 max_timestamp          int64
    43 producer_id            int64
    51 producer_epoch         int16
    53 base_sequence          int32
    57 records_count          int32
    61 records (compressed as one block when the codec is not NONE)

Each record: length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
key (varint length, -1 = null), value (likewise), header count varint, then per header a
key (varint length + UTF-8) and a value (varint length, -1 = null).

Because the CRC starts at ``attributes``, the broker may rewrite ``base_offset`` and
``partition_leader_epoch`` without recomputing it (:func:`set_base_offset`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum

import crc32c

from data_plane.records.compression import Compression, CompressionError, compress, decompress
from data_plane.records.varint import (
    VarintError,
    read_varint,
    read_varint32,
    write_varint,
)

MAGIC = 2
BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the part batch_length does not count
CRC_START = 21
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
# A batch this small cannot hold even one record; this large is never legitimate here.
MAX_BATCH_SIZE = 2**31 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class InvalidRecordBatch(ValueError):
    """A batch that must not be stored; ``reason`` is a short machine-readable cause.

    Reasons: ``truncated``, ``bad_length``, ``bad_magic``, ``bad_crc``, ``bad_count``,
    ``bad_record``, ``bad_compression``, ``too_large``, and ``no_key`` (a record without a
    key for a compacted log). ``record_index``, where set, is the position in its batch of
    the record that caused the refusal (Kafka's ``batch_index`` in a Produce response).
    """

    def __init__(self, reason: str, message: str, record_index: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.record_index = record_index


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies (header included)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)


@dataclass(frozen=True)
class RecordHeader:
    key: str
    value: bytes | None


@dataclass(frozen=True)
class Record:
    """One record; ``offset`` and ``timestamp`` are absolute (base + delta)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[RecordHeader, ...] = ()
    attributes: int = 0


@dataclass(frozen=True)
class RecordBatch:
    """A decoded batch: header fields plus its records."""

    base_offset: int
    records: tuple[Record, ...]
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    compression: Compression = Compression.NONE
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    is_transactional: bool = False
    is_control: bool = False
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    last_offset_delta: int | None = None  # defaults to the last record's delta
    max_timestamp: int | None = None  # defaults to the largest record timestamp
    base_timestamp: int | None = None  # defaults to the first record's timestamp
    extra_attributes: int = field(default=0, repr=False)

    def encode(self) -> bytes:
        """Serialise to magic-2 bytes, compressing the records with ``compression``."""
        if not self.records and self.last_offset_delta is None:
            raise ValueError("a batch needs at least one record or an explicit last_offset_delta")
        base_ts = self.base_timestamp
        if base_ts is None:
            base_ts = self.records[0].timestamp if self.records else 0
        body = bytearray()
        for record in self.records:
            _encode_record(record, self.base_offset, base_ts, body)
        payload = compress(self.compression, bytes(body))
        attributes = int(self.compression) | self.extra_attributes
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            attributes |= _TIMESTAMP_TYPE_BIT
        if self.is_transactional:
            attributes |= _TRANSACTIONAL_BIT
        if self.is_control:
            attributes |= _CONTROL_BIT
        last_delta = self.last_offset_delta
        if last_delta is None:
            last_delta = self.records[-1].offset - self.base_offset
        max_ts = self.max_timestamp
        if max_ts is None:
            max_ts = max((r.timestamp for r in self.records), default=base_ts)
        out = bytearray(BATCH_HEADER_SIZE)
        _HEADER.pack_into(
            out,
            0,
            self.base_offset,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
            self.partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_delta,
            base_ts,
            max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            len(self.records),
        )
        out += payload
        struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
        return bytes(out)

    @classmethod
    def decode(cls, buf: bytes | memoryview, *, max_uncompressed: int = 64 * 2**20) -> RecordBatch:
        """Decode one whole, valid batch (validation included)."""
        header = validate_batch(buf)
        payload = bytes(memoryview(buf)[BATCH_HEADER_SIZE : header.size])
        try:
            body = decompress(header.compression, payload, max_size=max_uncompressed)
        except CompressionError as exc:
            raise InvalidRecordBatch("bad_compression", str(exc)) from None
        records = _decode_records(body, header)
        return cls(
            base_offset=header.base_offset,
            records=tuple(records),
            partition_leader_epoch=header.partition_leader_epoch,
            compression=header.compression,
            timestamp_type=header.timestamp_type,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            last_offset_delta=header.last_offset_delta,
            max_timestamp=header.max_timestamp,
            base_timestamp=header.base_timestamp,
            extra_attributes=header.attributes & _DELETE_HORIZON_BIT,
        )


def _write_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        write_varint(-1, out)
    else:
        write_varint(len(value), out)
        out += value


def _encode_record(record: Record, base_offset: int, base_ts: int, out: bytearray) -> None:
    body = bytearray()
    body.append(record.attributes & 0xFF)
    write_varint(record.timestamp - base_ts, body)
    write_varint(record.offset - base_offset, body)
    _write_bytes(record.key, body)
    _write_bytes(record.value, body)
    write_varint(len(record.headers), body)
    for header in record.headers:
        _write_bytes(header.key.encode("utf-8"), body)
        _write_bytes(header.value, body)
    write_varint(len(body), out)
    out += body


def _read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint32(buf, pos)
    if length == -1:
        return None, pos
    if length < -1 or pos + length > end:
        raise InvalidRecordBatch("bad_record", "record field length runs past the record")
    return buf[pos : pos + length], pos + length


def decode_record(body: bytes, pos: int, header: BatchHeader) -> tuple[Record, int]:
    """The record whose length varint is at ``pos`` of a batch's (decompressed) records
    section, and where the next one starts. Raises :class:`InvalidRecordBatch`."""
    try:
        length, pos = read_varint32(body, pos)
        record_end = pos + length
        if length < 6 or record_end > len(body):
            raise InvalidRecordBatch("bad_record", "record length runs past the batch")
        attributes = body[pos]
        ts_delta, p = read_varint(body, pos + 1)
        offset_delta, p = read_varint32(body, p)
        key, p = _read_bytes(body, p, record_end)
        value, p = _read_bytes(body, p, record_end)
        header_count, p = read_varint32(body, p)
        if header_count < 0:
            raise InvalidRecordBatch("bad_record", "negative header count")
        headers = []
        for _ in range(header_count):
            hkey, p = _read_bytes(body, p, record_end)
            if hkey is None:
                raise InvalidRecordBatch("bad_record", "record header key is null")
            hvalue, p = _read_bytes(body, p, record_end)
            headers.append(RecordHeader(hkey.decode("utf-8"), hvalue))
    except (VarintError, UnicodeDecodeError) as exc:
        raise InvalidRecordBatch("bad_record", f"malformed record: {exc}") from None
    if p != record_end:
        raise InvalidRecordBatch("bad_record", "record length does not match its fields")
    record = Record(
        offset=header.base_offset + offset_delta,
        timestamp=header.base_timestamp + ts_delta,
        key=key,
        value=value,
        headers=tuple(headers),
        attributes=attributes,
    )
    return record, record_end


def _decode_records(body: bytes, header: BatchHeader) -> list[Record]:
    records: list[Record] = []
    pos = 0
    for _ in range(header.records_count):
        record, pos = decode_record(body, pos, header)
        records.append(record)
    if pos != len(body):
        raise InvalidRecordBatch("bad_count", "bytes remain after the last counted record")
    return records


# --- the cheap checks the append and recovery paths use -----------------------------------


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos`` (no CRC check)."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise InvalidRecordBatch("truncated", "fewer bytes than a batch header")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Check one batch at ``pos`` without decoding its records.

    Checks the sizes, magic, CRC-32C, and that the record count agrees with the offset
    deltas. The batch must lie wholly within ``buf``.
    """
    header = read_header(buf, pos)
    if header.magic != MAGIC:
        raise InvalidRecordBatch("bad_magic", f"magic {header.magic} is not supported (need 2)")
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidRecordBatch("bad_length", f"batch length {header.batch_length} is too small")
    end = pos + header.size
    if end > len(buf):
        raise InvalidRecordBatch("truncated", "batch runs past the end of the data")
    crc = crc32c.crc32c(memoryview(buf)[pos + CRC_START : end])
    if crc != header.crc:
        raise InvalidRecordBatch("bad_crc", "CRC-32C does not match the batch contents")
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise InvalidRecordBatch("bad_count", "negative record count or offset delta")
    if header.records_count == 0 and not header.is_control and header.last_offset_delta == 0:
        # Empty batches exist only after compaction removed every record (Kafka keeps them
        # to preserve producer state); they carry a non-zero last offset delta or the
        # control bit, never a plain empty produce.
        raise InvalidRecordBatch("bad_count", "batch holds no records")
    if header.records_count > header.last_offset_delta + 1:
        raise InvalidRecordBatch(
            "bad_count",
            f"{header.records_count} records do not fit in offset delta {header.last_offset_delta}",
        )
    return header


def iter_batches(buf: bytes | bytearray | memoryview, pos: int = 0) -> Iterator[BatchHeader]:
    """Validate and yield each complete batch header in ``buf`` from ``pos``; stops at the end."""
    end = len(buf)
    while pos < end:
        header = validate_batch(buf, pos)
        yield header
        pos += header.size


def set_base_offset(
    batch: bytes | bytearray, base_offset: int, *, leader_epoch: int | None = None
) -> bytearray:
    """A copy of ``batch`` with ``base_offset`` (and optionally the leader epoch) set.

    Neither field is covered by the CRC, so the result stays valid.
    """
    out = bytearray(batch)
    _OFFSET.pack_into(out, 0, base_offset)
    if leader_epoch is not None:
        _EPOCH.pack_into(out, 12, leader_epoch)
    return out
