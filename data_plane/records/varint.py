"""Variable-length integers as Kafka's protocol uses them (protobuf style).

``write_varint``/``read_varint`` are the zig-zag signed forms used inside records
(``varint`` for int32 fields, ``varlong`` for int64); ``write_uvarint``/``read_uvarint`` are
unsigned (compact lengths in flexible protocol versions). Readers take a buffer and an
offset and return ``(value, next_offset)``; they raise :class:`VarintError` on truncated or
over-long input instead of reading past the buffer.
"""

from __future__ import annotations

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class VarintError(ValueError):
    """Truncated, over-long or out-of-range varint."""


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def write_uvarint(value: int, out: bytearray) -> None:
    if value < 0:
        raise VarintError("unsigned varint cannot be negative")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(value: int, out: bytearray) -> None:
    if not INT64_MIN <= value <= INT64_MAX:
        raise VarintError(f"{value} does not fit in 64 bits")
    write_uvarint(zigzag(value) & 0xFFFFFFFFFFFFFFFF, out)


def read_uvarint(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 10
) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos >= end:
            raise VarintError("varint runs past the end of the buffer")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if i == max_bytes - 1 and max_bytes == 10 and byte > 1:
                raise VarintError("varint is too long for 64 bits")
            return result, pos
        shift += 7
    raise VarintError(f"varint is longer than {max_bytes} bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """A zig-zag varlong; int32 fields are range-checked by the caller."""
    raw, pos = read_uvarint(buf, pos)
    return unzigzag(raw), pos


def read_varint32(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    raw, pos = read_uvarint(buf, pos, max_bytes=5)
    value = unzigzag(raw)
    if not INT32_MIN <= value <= INT32_MAX:
        raise VarintError(f"{value} does not fit in 32 bits")
    return value, pos


def varint_size(value: int) -> int:
    raw = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size
