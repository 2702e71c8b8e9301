"""Declarative message schemas, as in Kafka's message specs.

A :class:`Message` lists :class:`Field` s. Each field names a logical type and the versions
it exists in (``versions``), may be null in (``nullable``), and (in flexible versions) is
carried as a tagged field (``tag`` + ``tagged``). A message's *flexible* versions switch
strings, bytes and arrays to their compact encodings and add a tagged-field section at the
end of the message and of every struct.

Decoded messages are plain ``dict`` s keyed by snake_case field names (nested structs are
dicts, arrays are lists). Encoding takes the same shape; a missing key takes the field's
default. Fields absent from a version are neither read nor written.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from data_plane.protocol.types import (
    BOOL,
    INT8,
    INT32,
    UUID,
    ZERO_UUID,
    Buffer,
    ProtocolError,
    _Bytes,
    _Fixed,
    _Records,
    _String,
    read_length,
    read_tagged_fields,
    write_length,
    write_tagged_fields,
)

Versions = tuple[int, int | None]
ALL: Versions = (0, None)
NONE: Versions = (-1, -1)


def in_range(version: int, versions: Versions) -> bool:
    lo, hi = versions
    return lo >= 0 and version >= lo and (hi is None or version <= hi)


@dataclass(frozen=True)
class Struct:
    fields: tuple[Field, ...]

    def __init__(self, *fields: Field) -> None:
        object.__setattr__(self, "fields", tuple(fields))


@dataclass(frozen=True)
class Array:
    element: Any  # a primitive type or a Struct


@dataclass(frozen=True)
class Field:
    name: str
    type: Any
    versions: Versions = ALL
    nullable: Versions = NONE
    tag: int | None = None
    tagged: Versions = NONE
    default: Any = field(default=None)

    def default_value(self, version: int) -> Any:
        if self.default is not None:
            return self.default
        if in_range(version, self.nullable):
            return None
        t = self.type
        if isinstance(t, Array):
            return []
        if isinstance(t, Struct):
            return {f.name: f.default_value(version) for f in t.fields}
        if isinstance(t, _String):
            return ""
        if isinstance(t, _Records):
            return None
        if isinstance(t, _Bytes):
            return b""
        if t is BOOL:
            return False
        if t is UUID:
            return ZERO_UUID
        return 0


# --- decoding --------------------------------------------------------------------------


def _read_value(
    t: Any, buf: Buffer, pos: int, version: int, flexible: bool, nullable: bool
) -> tuple[Any, int]:
    if isinstance(t, _Bytes):
        return t.read(buf, pos, compact=flexible, nullable=nullable)
    if isinstance(t, Array):
        n, pos = read_length(buf, pos, flexible, INT32)
        if n == -1:
            if not nullable:
                raise ProtocolError("null array where the schema forbids it")
            return None, pos
        if n < -1 or n > len(buf) - pos:
            raise ProtocolError(f"array of {n} elements cannot fit in the frame")
        items = []
        for _ in range(n):
            item, pos = _read_value(t.element, buf, pos, version, flexible, False)
            items.append(item)
        return items, pos
    if isinstance(t, Struct):
        if nullable:
            # A nullable struct is preceded by a marker byte: -1 null, 1 present (Kafka's
            # generated code; any negative marker reads as null).
            marker, pos = INT8.read(buf, pos)
            if marker < 0:
                return None, pos
        return _read_struct(t.fields, buf, pos, version, flexible)
    return t.read(buf, pos)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _Plan:
    """A struct's fields as one version sees them: (field, nullable) in wire order, and
    the tagged ones by tag. Worked out once per struct, version and flexibility, not for
    every element of every array."""

    regular: tuple[tuple[Field, bool], ...]
    tagged: Mapping[int, tuple[Field, bool]]


# id(fields) -> (fields, {(version, flexible): plan}); the fields tuple is kept so that its
# id cannot be reused by another object while the entry exists.
_PLANS: dict[int, tuple[Sequence[Field], dict[tuple[int, bool], _Plan]]] = {}


def _plan(fields: Sequence[Field], version: int, flexible: bool) -> _Plan:
    entry = _PLANS.get(id(fields))
    if entry is None or entry[0] is not fields:
        entry = _PLANS[id(fields)] = (fields, {})
    plans = entry[1]
    found = plans.get((version, flexible))
    if found is None:
        regular, tagged = [], {}
        for f in fields:
            if not in_range(version, f.versions):
                continue
            nullable = in_range(version, f.nullable)
            if flexible and f.tag is not None and in_range(version, f.tagged):
                tagged[f.tag] = (f, nullable)
            else:
                regular.append((f, nullable))
        found = plans[(version, flexible)] = _Plan(tuple(regular), tagged)
    return found


def _read_struct(
    fields: Sequence[Field], buf: Buffer, pos: int, version: int, flexible: bool
) -> tuple[dict[str, Any], int]:
    return _decoder(fields, version, flexible)(buf, pos)


# A struct's decoder for one (version, flexible), built once from its plan, as _encoder:
# runs of fixed-size fields are unpacked with one struct.Struct.
_Decoder = Callable[[Buffer, int], tuple[dict[str, Any], int]]
_Step = Callable[[Buffer, int, dict[str, Any]], int]
_DECODERS: dict[tuple[int, int, bool], tuple[Sequence[Field], _Decoder]] = {}


_Built = TypeVar("_Built")


def _built(
    cache: dict[tuple[int, int, bool], tuple[Sequence[Field], _Built]],
    build: Callable[[Sequence[Field], int, bool], _Built],
    fields: Sequence[Field],
    version: int,
    flexible: bool,
) -> _Built:
    """``build(fields, version, flexible)``, made once and kept in ``cache`` (keyed like
    _PLANS: the fields tuple is kept so that its id cannot be reused meanwhile)."""
    key = (id(fields), version, flexible)
    entry = cache.get(key)
    if entry is None or entry[0] is not fields:
        entry = cache[key] = (fields, build(fields, version, flexible))
    return entry[1]


def _decoder(fields: Sequence[Field], version: int, flexible: bool) -> _Decoder:
    return _built(_DECODERS, _compile_decoder, fields, version, flexible)


def _compile_decoder(fields: Sequence[Field], version: int, flexible: bool) -> _Decoder:
    plan = _plan(fields, version, flexible)
    steps: list[_Step] = []
    run: list[Field] = []
    for f, nullable in plan.regular:
        if isinstance(f.type, _Fixed) and not nullable:
            run.append(f)
            continue
        if run:
            steps.append(_fixed_read_step(tuple(run)))
            run = []
        steps.append(_value_read_step(f, nullable, version, flexible))
    if run:
        steps.append(_fixed_read_step(tuple(run)))
    tagged = {tag: f for tag, (f, _) in plan.tagged.items()}

    def decode(buf: Buffer, pos: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        # Wire order: regular fields, then the tagged ones (at their defaults unless sent).
        for step in steps:
            pos = step(buf, pos, out)
        for f in tagged.values():
            out[f.name] = f.default_value(version)
        if flexible:
            raw, pos = read_tagged_fields(buf, pos)
            for tag, data in raw.items():
                tf = tagged.get(tag)
                if tf is None:
                    continue  # unknown tags are skipped, as the spec requires
                value, end = _read_value(
                    tf.type, data, 0, version, True, in_range(version, tf.nullable)
                )
                if end != len(data):
                    raise ProtocolError(f"tagged field {tf.name} has trailing bytes")
                out[tf.name] = value
        return out, pos

    return decode


def _fixed_read_step(run: tuple[Field, ...]) -> _Step:
    names = tuple(f.name for f in run)
    unpacker = struct.Struct(">" + "".join(f.type.struct.format.lstrip(">") for f in run))
    size = unpacker.size

    def step(buf: Buffer, pos: int, out: dict[str, Any]) -> int:
        if pos + size > len(buf):
            raise ProtocolError(f"need {size} bytes at {pos}, frame has {len(buf) - pos}")
        for name, value in zip(names, unpacker.unpack_from(buf, pos), strict=True):
            out[name] = value
        return pos + size

    return step


def _value_read_step(f: Field, nullable: bool, version: int, flexible: bool) -> _Step:
    name, t = f.name, f.type
    element = t.element if isinstance(t, Array) else None
    if isinstance(element, Struct):
        element_decoder = _decoder(element.fields, version, flexible)

        def array_step(buf: Buffer, pos: int, out: dict[str, Any]) -> int:
            n, pos = read_length(buf, pos, flexible, INT32)
            if n == -1:
                if not nullable:
                    raise ProtocolError("null array where the schema forbids it")
                out[name] = None
                return pos
            if n < -1 or n > len(buf) - pos:
                raise ProtocolError(f"array of {n} elements cannot fit in the frame")
            items = []
            for _ in range(n):
                item, pos = element_decoder(buf, pos)
                items.append(item)
            out[name] = items
            return pos

        return array_step

    def step(buf: Buffer, pos: int, out: dict[str, Any]) -> int:
        out[name], pos = _read_value(t, buf, pos, version, flexible, nullable)
        return pos

    return step


# --- encoding --------------------------------------------------------------------------


_MISSING = object()


class _Writer:
    """Collects output; a non-bytes records value (e.g. a file slice) becomes its own chunk."""

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.out = bytearray()

    def external(self, value: Any) -> None:
        self.chunks.append(self.out)
        self.chunks.append(value)
        self.out = bytearray()

    def finish(self) -> list[Any]:
        self.chunks.append(self.out)
        return [c for c in self.chunks if not isinstance(c, bytearray) or c]


def _is_bytes_like(value: Any) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)


def _write_value(
    t: Any, value: Any, w: _Writer, version: int, flexible: bool, nullable: bool
) -> None:
    if isinstance(t, _Records) and value is not None and not _is_bytes_like(value):
        write_length(len(value), w.out, flexible, INT32)
        w.external(value)
        return
    if isinstance(t, _Bytes):
        t.write(value, w.out, compact=flexible, nullable=nullable)
        return
    if isinstance(t, Array):
        if value is None:
            if not nullable:
                raise ProtocolError("null array where the schema forbids it")
            write_length(-1, w.out, flexible, INT32)
            return
        write_length(len(value), w.out, flexible, INT32)
        for item in value:
            _write_value(t.element, item, w, version, flexible, False)
        return
    if isinstance(t, Struct):
        if nullable:
            INT8.write(-1 if value is None else 1, w.out)
            if value is None:
                return
        _write_struct(t.fields, value, w, version, flexible)
        return
    assert isinstance(t, _Fixed) or hasattr(t, "write")
    t.write(value, w.out)


def _write_struct(
    fields: Sequence[Field], obj: Mapping[str, Any], w: _Writer, version: int, flexible: bool
) -> None:
    _encoder(fields, version, flexible)(obj, w)


# A struct's encoder for one (version, flexible), built once from its plan: runs of
# fixed-size fields are packed with one struct.Struct, arrays of structs call their
# element's encoder directly, and defaults are computed up front. Keyed like _PLANS.
_Encoder = Callable[[Any, _Writer], None]
_ENCODERS: dict[tuple[int, int, bool], tuple[Sequence[Field], _Encoder]] = {}


def _encoder(fields: Sequence[Field], version: int, flexible: bool) -> _Encoder:
    return _built(_ENCODERS, _compile, fields, version, flexible)


def _compile(fields: Sequence[Field], version: int, flexible: bool) -> _Encoder:
    plan = _plan(fields, version, flexible)
    steps: list[_Encoder] = []
    run: list[Field] = []
    for f, nullable in plan.regular:
        if isinstance(f.type, _Fixed) and not nullable:
            run.append(f)
            continue
        if run:
            steps.append(_fixed_step(tuple(run), version))
            run = []
        steps.append(_value_step(f, nullable, version, flexible))
    if run:
        steps.append(_fixed_step(tuple(run), version))
    tagged = [
        (tag, f, nullable, f.default_value(version)) for tag, (f, nullable) in plan.tagged.items()
    ]

    def encode(obj: Any, w: _Writer) -> None:
        if not isinstance(obj, Mapping):
            obj = {}
        for step in steps:
            step(obj, w)
        if flexible:
            written: dict[int, bytes] = {}
            for tag, f, nullable, default in tagged:
                value = obj.get(f.name, _MISSING)
                if value is _MISSING or (value is None and not nullable):
                    value = default
                if value == default:
                    continue  # tagged fields are omitted at their default
                sub = _Writer()
                _write_value(f.type, value, sub, version, True, nullable)
                written[tag] = bytes(sub.out)
            write_tagged_fields(written, w.out)

    return encode


def _fixed_step(run: tuple[Field, ...], version: int) -> _Encoder:
    """Fields of fixed size, side by side: one pack (a missing or None value: its default)."""
    pairs = tuple((f.name, f.default_value(version)) for f in run)
    packer = struct.Struct(">" + "".join(f.type.struct.format.lstrip(">") for f in run))

    def step(obj: Mapping[str, Any], w: _Writer) -> None:
        get = obj.get
        values = [default if (v := get(name)) is None else v for name, default in pairs]
        try:
            w.out += packer.pack(*values)
        except struct.error:
            for f, value in zip(run, values, strict=True):
                f.type.write(value, w.out)  # raises the field's own ProtocolError
            raise

    return step


def _value_step(f: Field, nullable: bool, version: int, flexible: bool) -> _Encoder:
    name, t, default = f.name, f.type, f.default_value(version)
    element = t.element if isinstance(t, Array) else None
    if isinstance(element, Struct):
        element_encoder = _encoder(element.fields, version, flexible)

        def array_step(obj: Mapping[str, Any], w: _Writer) -> None:
            value = obj.get(name, _MISSING)
            if value is _MISSING or (value is None and not nullable):
                value = default
            if value is None:
                write_length(-1, w.out, flexible, INT32)
                return
            write_length(len(value), w.out, flexible, INT32)
            for item in value:
                element_encoder(item, w)

        return array_step

    def step(obj: Mapping[str, Any], w: _Writer) -> None:
        value = obj.get(name, _MISSING)
        if value is _MISSING or (value is None and not nullable):
            value = default
        _write_value(t, value, w, version, flexible, nullable)

    return step


# --- messages --------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    api_key: int
    name: str
    kind: str  # "request" | "response"
    valid: Versions
    flexible: Versions
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return in_range(version, self.flexible)

    def check_version(self, version: int) -> None:
        if not in_range(version, self.valid):
            raise ProtocolError(f"{self.name} {self.kind} v{version} is not supported")

    def decode(
        self, buf: Buffer, version: int, pos: int = 0, *, exact: bool = True
    ) -> dict[str, Any]:
        self.check_version(version)
        value, end = _read_struct(self.fields, buf, pos, version, self.is_flexible(version))
        if exact and end != len(buf):
            raise ProtocolError(
                f"{self.name} {self.kind} v{version}: {len(buf) - end} trailing bytes"
            )
        return value

    def encode_chunks(self, obj: Mapping[str, Any], version: int) -> list[Any]:
        """Encoded bytes, split around any external records values (for sendfile)."""
        self.check_version(version)
        w = _Writer()
        _write_struct(self.fields, obj, w, version, self.is_flexible(version))
        return w.finish()

    def encode(self, obj: Mapping[str, Any], version: int) -> bytes:
        chunks = self.encode_chunks(obj, version)
        if any(not _is_bytes_like(c) for c in chunks):
            raise ProtocolError("use encode_chunks for messages with external records")
        return b"".join(chunks)


def message(
    api_key: int, name: str, kind: str, valid: Versions, flexible: Versions, *fields: Field
) -> Message:
    return Message(api_key, name, kind, valid, flexible, tuple(fields))
