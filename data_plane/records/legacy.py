"""Message formats v0 and v1 (magic 0 and 1): up-converted to one RecordBatch v2 (what
the log stores) from Produce v0-2, as Kafka's LogValidator converts them, and written
from stored batches for Fetch v0-3 (``down_convert``).

A message set is a run of ``offset int64, size int32, message``; a message is ``crc
uint32`` (CRC-32 of the rest), ``magic int8``, ``attributes int8`` (the low three bits: the
codec), ``timestamp int64`` (magic 1 only), then the key and the value as int32-length
bytes (-1: null). A compressed message's value is a whole inner message set in that
codec (one level deep; magic 1 inner offsets are relative). Timestamps: magic 0 has none
(the records get -1, Kafka's NO_TIMESTAMP); magic 1 carries its own, or the wrapper's when
the wrapper says log append time (attribute bit 3). The offsets a producer sends are not
used: the log assigns them. The batch keeps the producer's codec (Kafka's
``compression.type=producer``).
"""

from __future__ import annotations

import struct
import zlib

from data_plane.records.batch import (
    InvalidRecordBatch,
    Record,
    RecordBatch,
    TimestampType,
    validate_batch,
)
from data_plane.records.compression import Compression, CompressionError, decompress

_ENTRY = struct.Struct(">qi")  # offset, message size
_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
NO_TIMESTAMP = -1
_CODECS = {0: Compression.NONE, 1: Compression.GZIP, 2: Compression.SNAPPY, 3: Compression.LZ4}
_LOG_APPEND_TIME = 0x08


def _bytes(data: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise InvalidRecordBatch("truncated", "message ends inside a length")
    (n,) = _LENGTH.unpack_from(data, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise InvalidRecordBatch("bad_length", f"a key or value of {n} bytes does not fit")
    return bytes(data[pos : pos + n]), pos + n


def _messages(
    data: memoryview, max_size: int, depth: int, wrapper_time: int | None
) -> tuple[list[tuple[int, bytes | None, bytes | None]], Compression]:
    """(timestamp, key, value) of every message, unwrapping compressed ones; the codec."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    codec = Compression.NONE
    pos = 0
    while pos < len(data):
        if pos + _ENTRY.size > len(data):
            raise InvalidRecordBatch("truncated", "message set ends inside an entry")
        _, size = _ENTRY.unpack_from(data, pos)
        start = pos + _ENTRY.size
        end = start + size
        if size < _HEAD.size + 8 or end > len(data):
            raise InvalidRecordBatch("bad_length", f"message of {size} bytes does not fit")
        crc, magic, attributes = _HEAD.unpack_from(data, start)
        if zlib.crc32(data[start + 4 : end]) != crc:
            raise InvalidRecordBatch("bad_crc", "message CRC-32 does not match")
        if magic not in (0, 1):
            raise InvalidRecordBatch("bad_magic", f"magic {magic} in a message set")
        pos = start + _HEAD.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _TIMESTAMP.unpack_from(data, pos)
            pos += 8
            if wrapper_time is not None:
                timestamp = wrapper_time
        key, pos = _bytes(data, pos, end)
        value, pos = _bytes(data, pos, end)
        if pos != end:
            raise InvalidRecordBatch("bad_length", "message has bytes after its value")
        inner_codec = _CODECS.get(attributes & 0x07)
        if inner_codec is None:
            raise InvalidRecordBatch("bad_codec", f"codec {attributes & 0x07} in magic {magic}")
        if inner_codec is Compression.NONE:
            out.append((timestamp, key, value))
            continue
        if depth > 0 or value is None:
            raise InvalidRecordBatch("bad_nesting", "a compressed message inside another")
        try:
            inner = decompress(inner_codec, value, max_size=max_size)
        except CompressionError as exc:
            raise InvalidRecordBatch("bad_compression", str(exc)) from None
        log_append = magic == 1 and attributes & _LOG_APPEND_TIME
        found, _ = _messages(
            memoryview(inner), max_size, depth + 1, timestamp if log_append else None
        )
        out.extend(found)
        codec = inner_codec
    return out, codec


def up_convert(data: bytes | bytearray | memoryview, *, max_size: int) -> bytes:
    """The message set ``data`` as one RecordBatch v2 (base offset 0, the producer's
    codec); ``max_size`` bounds what a compressed message may expand to. Raises
    :class:`InvalidRecordBatch` for anything malformed (nothing is half converted)."""
    messages, codec = _messages(memoryview(data).cast("B"), max_size, 0, None)
    if not messages:
        raise InvalidRecordBatch("empty", "message set without a whole message")
    records = tuple(
        Record(offset=i, timestamp=ts, key=key, value=value)
        for i, (ts, key, value) in enumerate(messages)
    )
    return RecordBatch(base_offset=0, records=records, compression=codec).encode()


def _message(
    magic: int,
    offset: int,
    timestamp: int,
    log_append: bool,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    body = bytearray(struct.pack(">bb", magic, _LOG_APPEND_TIME if log_append else 0))
    if magic == 1:
        body += _TIMESTAMP.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += _LENGTH.pack(-1)
        else:
            body += _LENGTH.pack(len(part))
            body += part
    message = struct.pack(">I", zlib.crc32(body)) + body
    return _ENTRY.pack(offset, len(message)) + message


def down_convert(data: bytes | bytearray | memoryview, magic: int, first_offset: int) -> bytes:
    """RecordBatch v2 bytes (whole batches, as the log reads them) as a message set in
    format ``magic`` (0 or 1) for Fetch v0-3, as Kafka's down-conversion writes it: one
    uncompressed message per record at its absolute offset, none below ``first_offset``
    (a fetch may start inside a batch), control batches left out, headers dropped (the
    old formats have none); magic 1 carries the record's timestamp, or the batch's with
    the log-append-time flag when the batch says so."""
    out = bytearray()
    view = memoryview(data).cast("B")
    pos = 0
    while pos < len(view):
        header = validate_batch(view, pos)
        batch = RecordBatch.decode(view[pos : pos + header.size])
        pos += header.size
        if batch.is_control:
            continue
        log_append = batch.timestamp_type is TimestampType.LOG_APPEND_TIME
        for r in batch.records:
            if r.offset < first_offset:
                continue
            timestamp = header.max_timestamp if log_append else r.timestamp
            out += _message(magic, r.offset, timestamp, log_append and magic == 1, r.key, r.value)
    return bytes(out)
