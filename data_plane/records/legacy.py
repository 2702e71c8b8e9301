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
``compression.type=producer``). LZ4 in magic 0 comes from Kafka 0.8/0.9 clients, whose
frames carry a wrong header checksum (:func:`kafka08_lz4_frame`).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from data_plane.records.batch import (
    InvalidRecordBatch,
    Record,
    RecordBatch,
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
        if inner_codec is Compression.LZ4 and magic == 0:
            value = kafka08_lz4_frame(value)
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


_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_P1, _P2, _P3, _P4, _P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 of fewer than 16 bytes (an LZ4 frame descriptor), as the xxHash
    specification defines it for short inputs: no stripes, the 4-byte lanes and then the
    bytes left folded into the accumulator, then the avalanche."""
    if len(data) >= 16:
        raise ValueError("xxh32_short takes fewer than 16 bytes")
    acc = (seed + _P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        (lane,) = struct.unpack_from("<I", data, pos)
        acc = (_rotl((acc + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    for byte in data[pos:]:
        acc = (_rotl((acc + byte * _P5) & _M32, 11) * _P1) & _M32
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    return acc ^ (acc >> 16)


def kafka08_lz4_frame(frame: bytes) -> bytes:
    """An LZ4 frame from a message-format-v0 producer (Kafka 0.8 and 0.9 clients) with
    its header checksum made standard. Those clients computed the checksum over the magic
    number and the descriptor instead of the descriptor alone (KAFKA-3160), and Kafka's
    brokers ignore it for magic 0; here the right one is put in so the frame decodes (the
    content itself is still checked by the codec)."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame
    flags = frame[4]
    end = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)  # size, dict id
    if len(frame) <= end:
        return frame
    checksum = (xxh32_short(frame[4:end]) >> 8) & 0xFF
    return frame[:end] + bytes((checksum,)) + frame[end + 1 :]


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


_BATCH_HEAD = struct.Struct(">qi4xbIhiqq14xi")  # the v2 header fields down-conversion uses
_BATCH_HEAD_SIZE = 61
_V0_HEAD = struct.Struct(">bbi")  # magic, attributes, key length
_V1_HEAD = struct.Struct(">bbqi")  # magic, attributes, timestamp, key length
_V0_HEAD_NO_KEY = struct.Struct(">bbii")  # ... key length -1, value length
_V1_HEAD_NO_KEY = struct.Struct(">bbqii")
_ENTRY_CRC = struct.Struct(">qiI")  # offset, message size, crc
_CONTROL = 0x20
_TIMESTAMP_TYPE = 0x08


# The value of each one-byte zig-zag varint (bytes below 0x80); None: the varint goes on.
_ONE_BYTE: tuple[int | None, ...] = tuple((b >> 1) ^ -(b & 1) for b in range(128)) + (None,) * 128


def _varint_slow(buf: bytes, pos: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecordBatch("bad_record", "varint longer than 10 bytes")


def down_convert(data: bytes | bytearray | memoryview, magic: int, first_offset: int) -> bytes:
    """RecordBatch v2 bytes (whole batches, as the log reads them) as a message set in
    format ``magic`` (0 or 1) for Fetch v0-3, as Kafka's down-conversion writes it: one
    uncompressed message per record at its absolute offset, none below ``first_offset``
    (a fetch may start inside a batch), control batches left out, headers dropped (the
    old formats have none); magic 1 carries the record's timestamp, or the batch's with
    the log-append-time flag when the batch says so. A batch cut short at the end of
    ``data`` is left out, as an old consumer skips a partial message.

    The batches come from the log, which validated them (CRC-32C included) on append.
    Where aiokafka's compiled record codecs are installed (its wheels ship them), they
    read the records and write the messages; they cannot set the log-append-time flag,
    so such batches, and every batch without them, go through :func:`_messages_from`.
    Stored data that does not parse raises :class:`InvalidRecordBatch`."""
    out = bytearray()
    view = memoryview(data).cast("B")
    total = len(view)
    pos = 0
    try:
        while pos + _BATCH_HEAD_SIZE <= total:
            base, length, batch_magic, _, attributes, _, base_ts, max_ts, count = (
                _BATCH_HEAD.unpack_from(view, pos)
            )
            end = pos + 12 + length
            if end > total:
                break
            if batch_magic != 2:
                raise InvalidRecordBatch("bad_magic", f"stored batch with magic {batch_magic}")
            if attributes & _CONTROL:
                pos = end
                continue
            log_append = bool(attributes & _TIMESTAMP_TYPE)
            if _COMPILED is not None and not log_append:
                reader, builder_class = _COMPILED
                builder = builder_class(magic, 0, _NO_LIMIT)
                append = builder.append
                for r in reader(bytes(view[pos:end])):
                    if r.offset >= first_offset:
                        if append(r.offset, r.timestamp, r.key, r.value) is None:
                            raise InvalidRecordBatch("too_large", "batch too large to convert")
                out += builder.build()
            else:
                body = bytes(view[pos + _BATCH_HEAD_SIZE : end])
                codec = attributes & 0x07
                if codec:
                    body = decompress(Compression(codec), body, max_size=64 * 2**20)
                time = max_ts if log_append else None
                _messages_from(body, count, base, base_ts, time, magic, first_offset, out)
            pos = end
    except (IndexError, struct.error, ValueError) as exc:
        if isinstance(exc, InvalidRecordBatch):
            raise
        raise InvalidRecordBatch("bad_record", f"stored batch does not parse: {exc}") from None
    return bytes(out)


def _compiled() -> tuple[Any, Any] | None:
    """aiokafka's compiled v2 batch reader and legacy message set builder, or None."""
    try:
        from aiokafka.record._crecords import (  # type: ignore[import-untyped]
            DefaultRecordBatch,
            LegacyRecordBatchBuilder,
        )
    except ImportError:  # a platform without its wheels: the pure-Python path
        return None
    return DefaultRecordBatch, LegacyRecordBatchBuilder


_COMPILED = _compiled()
_NO_LIMIT = 2**31 - 1  # the builder's size bound: a fetch's batches always fit


def _messages_from(
    body: bytes,
    count: int,
    base: int,
    base_ts: int,
    log_append_time: int | None,
    magic: int,
    first_offset: int,
    out: bytearray,
) -> None:
    """Append to ``out`` the messages of the ``count`` records in a batch's (decompressed)
    records section, read field by field without building records: a one-byte varint
    (every length under 64) is looked up in a table, longer ones read by a loop. With
    ``log_append_time``, magic 1 messages carry it and the log-append-time flag."""
    head = _V1_HEAD if magic == 1 else _V0_HEAD
    head_no_key = _V1_HEAD_NO_KEY if magic == 1 else _V0_HEAD_NO_KEY
    flag = _LOG_APPEND_TIME if magic == 1 and log_append_time is not None else 0
    entry = _ENTRY_CRC.pack
    crc32 = zlib.crc32
    varint = _varint_slow
    one_byte = _ONE_BYTE
    length_pack = _LENGTH.pack
    p = 0
    for _ in range(count):
        size = one_byte[body[p]]
        if size is None:
            size, p = varint(body, p)
        else:
            p += 1
        record_end = p + size
        p += 1  # record attributes (unused)
        ts_delta = one_byte[body[p]]
        if ts_delta is None:
            ts_delta, p = varint(body, p)
        else:
            p += 1
        offset_delta = one_byte[body[p]]
        if offset_delta is None:
            offset_delta, p = varint(body, p)
        else:
            p += 1
        offset = base + offset_delta
        if offset < first_offset:
            p = record_end
            continue
        key_len = one_byte[body[p]]
        if key_len is None:
            key_len, p = varint(body, p)
        else:
            p += 1
        key_at = p
        if key_len > 0:
            p += key_len
        value_len = one_byte[body[p]]
        if value_len is None:
            value_len, p = varint(body, p)
        else:
            p += 1
        if p + max(value_len, 0) > record_end:
            raise InvalidRecordBatch("bad_record", "record field runs past its record")
        value = body[p : p + value_len] if value_len > 0 else b""
        p = record_end
        ts = base_ts + ts_delta if log_append_time is None else log_append_time
        if key_len < 0:
            if magic == 1:
                message = head_no_key.pack(1, flag, ts, -1, value_len) + value
            else:
                message = head_no_key.pack(0, 0, -1, value_len) + value
        else:
            start = head.pack(1, flag, ts, key_len) if magic == 1 else head.pack(0, 0, key_len)
            message = b"".join(
                (start, body[key_at : key_at + key_len], length_pack(value_len), value)
            )
        out += entry(offset, len(message) + 4, crc32(message))
        out += message
