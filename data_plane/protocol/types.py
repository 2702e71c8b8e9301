"""Primitive wire types. Each has ``read(buf, pos) -> (value, pos)`` and ``write(value, out)``.

Strings, bytes and arrays have two encodings: classic (int16/int32 length, -1 = null) and
compact (unsigned varint length + 1, 0 = null), used in *flexible* message versions. The
schema layer picks the encoding per version, so message definitions name only the logical
type (:data:`STRING`, :data:`BYTES`, :class:`Array`).

Readers never allocate from an unchecked length: every length is compared with the bytes
that remain before slicing, and array counts are bounded by the remaining bytes (an element
takes at least one byte), so a hostile frame cannot make the decoder reserve memory it does
not hold. Violations raise :class:`ProtocolError`.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Protocol, runtime_checkable

from data_plane.records.varint import (
    VarintError,
    read_uvarint,
    read_varint,
    write_uvarint,
    write_varint,
)

Buffer = bytes | bytearray | memoryview


@runtime_checkable
class ExternalRecords(Protocol):
    """A records value the encoder does not copy but sends as its own chunk: the broker's
    file slices (``data_plane.log.segment.FileSlice``), written with sendfile. Only its
    length goes into the message."""

    def __len__(self) -> int: ...


class ProtocolError(ValueError):
    """A malformed frame: the connection that sent it is closed."""


def _need(buf: Buffer, pos: int, n: int) -> None:
    if n < 0 or pos + n > len(buf):
        raise ProtocolError(f"need {n} bytes at {pos}, frame has {len(buf) - pos}")


class _Fixed:
    def __init__(self, name: str, fmt: str) -> None:
        self.name = name
        self.struct = struct.Struct(">" + fmt)
        self.size = self.struct.size

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        _need(buf, pos, self.size)
        return self.struct.unpack_from(buf, pos)[0], pos + self.size

    def write(self, value: Any, out: bytearray) -> None:
        try:
            out += self.struct.pack(value)
        except struct.error as exc:
            raise ProtocolError(f"{self.name} cannot hold {value!r}: {exc}") from None

    def __repr__(self) -> str:
        return self.name


INT8 = _Fixed("int8", "b")
INT16 = _Fixed("int16", "h")
INT32 = _Fixed("int32", "i")
INT64 = _Fixed("int64", "q")
UINT16 = _Fixed("uint16", "H")
UINT32 = _Fixed("uint32", "I")
FLOAT64 = _Fixed("float64", "d")


class _Bool:
    name = "bool"

    def read(self, buf: Buffer, pos: int) -> tuple[bool, int]:
        _need(buf, pos, 1)
        return buf[pos] != 0, pos + 1

    def write(self, value: bool, out: bytearray) -> None:
        out.append(1 if value else 0)

    def __repr__(self) -> str:
        return "bool"


BOOL = _Bool()


class _Uuid:
    name = "uuid"

    def read(self, buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
        _need(buf, pos, 16)
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16

    def write(self, value: uuid.UUID | None, out: bytearray) -> None:
        out += (value or ZERO_UUID).bytes

    def __repr__(self) -> str:
        return "uuid"


UUID = _Uuid()
ZERO_UUID = uuid.UUID(int=0)


def read_unsigned_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos, max_bytes=5)
    except VarintError as exc:
        raise ProtocolError(str(exc)) from None


def read_signed_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    try:
        return read_varint(buf, pos)
    except VarintError as exc:
        raise ProtocolError(str(exc)) from None


class _Varint:
    """Signed zig-zag varint/varlong as a field type (rare in messages, common in records)."""

    name = "varint"

    def read(self, buf: Buffer, pos: int) -> tuple[int, int]:
        return read_signed_varint(buf, pos)

    def write(self, value: int, out: bytearray) -> None:
        write_varint(value, out)


VARINT = _Varint()


# --- length-prefixed values -------------------------------------------------------------


def read_length(buf: Buffer, pos: int, compact: bool, classic: _Fixed) -> tuple[int, int]:
    """A length that is -1 for null, in the compact or classic encoding."""
    if compact:
        n, pos = read_unsigned_varint(buf, pos)
        return n - 1, pos
    return classic.read(buf, pos)


def write_length(n: int, out: bytearray, compact: bool, classic: _Fixed) -> None:
    if compact:
        write_uvarint(n + 1, out)
    else:
        classic.write(n, out)


class _Bytes:
    """``bytes`` (int32 length) / compact bytes. Decodes to a zero-copy memoryview slice."""

    name = "bytes"
    classic_length = INT32

    def read(self, buf: Buffer, pos: int, *, compact: bool, nullable: bool) -> tuple[Any, int]:
        n, pos = read_length(buf, pos, compact, self.classic_length)
        if n == -1:
            if not nullable:
                raise ProtocolError(f"null {self.name} where the schema forbids it")
            return None, pos
        if n < -1:
            raise ProtocolError(f"negative {self.name} length {n}")
        _need(buf, pos, n)
        return self._convert(memoryview(buf)[pos : pos + n]), pos + n

    def _convert(self, view: memoryview) -> Any:
        return view

    def write(self, value: Any, out: bytearray, *, compact: bool, nullable: bool) -> None:
        if value is None:
            if not nullable:
                raise ProtocolError(f"null {self.name} where the schema forbids it")
            write_length(-1, out, compact, self.classic_length)
            return
        raw = self._encode(value)
        write_length(len(raw), out, compact, self.classic_length)
        out += raw

    def _encode(self, value: Any) -> bytes | bytearray | memoryview:
        return value  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return self.name


class _String(_Bytes):
    name = "string"
    classic_length = INT16

    def _convert(self, view: memoryview) -> str:
        try:
            return bytes(view).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not valid UTF-8") from None

    def _encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise ProtocolError(f"expected a string, got {type(value).__name__}")
        return value.encode("utf-8")


class _Records(_Bytes):
    """A record set: nullable bytes holding RecordBatch v2 data (kept as a memoryview).

    When encoding, the value may be any object with ``__len__`` that is not bytes-like (e.g.
    a file slice for sendfile): it is then emitted as a separate chunk by
    :func:`~data_plane.protocol.schema.encode_chunks` rather than copied.
    """

    name = "records"


BYTES = _Bytes()
STRING = _String()
RECORDS = _Records()


# --- tagged fields --------------------------------------------------------------------------


def read_tagged_fields(buf: Buffer, pos: int) -> tuple[dict[int, memoryview], int]:
    count, pos = read_unsigned_varint(buf, pos)
    if count > len(buf) - pos:
        raise ProtocolError("more tagged fields than bytes")
    fields: dict[int, memoryview] = {}
    last = -1
    for _ in range(count):
        tag, pos = read_unsigned_varint(buf, pos)
        if tag <= last:
            raise ProtocolError("tagged fields out of order")
        last = tag
        size, pos = read_unsigned_varint(buf, pos)
        _need(buf, pos, size)
        fields[tag] = memoryview(buf)[pos : pos + size]
        pos += size
    return fields, pos


def write_tagged_fields(fields: dict[int, bytes], out: bytearray) -> None:
    write_uvarint(len(fields), out)
    for tag in sorted(fields):
        write_uvarint(tag, out)
        write_uvarint(len(fields[tag]), out)
        out += fields[tag]
