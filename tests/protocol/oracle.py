"""Cross-checking our schemas against kafka-python's independently generated classes.

For a message and version we build a sample from *our* schema (every field set to a
non-default value, arrays of two, nullable fields optionally null), encode it with our
codec, decode it with kafka-python's class, re-encode it with kafka-python, and require
the same bytes and the same values. A disagreement in any field's type, order, version
range, nullability or tag shows up as different bytes.
"""

from __future__ import annotations

import importlib
import uuid
from typing import Any

from data_plane.protocol.schema import Array, Field, Message, Struct, in_range
from data_plane.protocol.types import (
    BOOL,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    UINT16,
    UUID,
    _Bytes,
    _Records,
    _String,
)

_KP_CLASSES = {
    "request": "{name}Request",
    "response": "{name}Response",
}


def kafka_python_class(message: Message) -> Any:
    """kafka-python's class for the message, or None when it has none (newer APIs)."""
    name = _KP_CLASSES[message.kind].format(name=message.name)
    module = importlib.import_module("kafka.protocol")
    for sub in ("metadata", "producer", "consumer", "admin", "sasl"):
        try:
            mod = importlib.import_module(f"kafka.protocol.{sub}")
        except ImportError:
            continue
        if hasattr(mod, name):
            return getattr(mod, name)
    return getattr(module, name, None)


def kio_class(message: Message, version: int) -> Any:
    """kio's class for one version of the message (kio generates a class per version
    from Kafka's JSON definitions): the second oracle, for APIs kafka-python lacks."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in message.name).lstrip("_")
    module = importlib.import_module(f"kio.schema.{snake}.v{version}.{message.kind}")
    return getattr(module, _KP_CLASSES[message.kind].format(name=message.name))


def sample(
    fields: tuple[Field, ...], version: int, flexible: bool, *, nulls: bool, seed: int = 1
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, f in enumerate(fields):
        if not in_range(version, f.versions):
            continue
        if nulls and in_range(version, f.nullable):
            out[f.name] = None
            continue
        out[f.name] = _value(f.type, version, flexible, nulls=nulls, seed=seed * 31 + i)
    return out


def _value(t: Any, version: int, flexible: bool, *, nulls: bool, seed: int) -> Any:
    if isinstance(t, Array):
        return [_value(t.element, version, flexible, nulls=nulls, seed=seed + k) for k in (1, 2)]
    if isinstance(t, Struct):
        return sample(t.fields, version, flexible, nulls=nulls, seed=seed)
    if isinstance(t, _Records):
        return bytes(range(seed % 7, seed % 7 + 9))
    if isinstance(t, _String):
        return f"s{seed}"
    if isinstance(t, _Bytes):
        return bytes([seed % 251, 1, 2])
    if t is BOOL:
        return True
    if t is UUID:
        return uuid.UUID(int=seed * 7919 + 1)
    if t is INT8:
        return seed % 100 + 1
    if t in (INT16, UINT16):
        return seed % 30000 + 1
    if t is INT32:
        return (seed * 101 + 1) % 2**31
    if t is INT64:
        return seed * 1_000_003 + 1
    if t is FLOAT64:
        return seed + 0.5
    raise AssertionError(f"no sample for {t!r}")


def normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalise(v) for v in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def cross_check(message: Message, version: int, *, nulls: bool) -> None:
    data = sample(message.fields, version, message.is_flexible(version), nulls=nulls)
    if message.api_key == 18 and message.kind == "response":
        # Kafka parses an ApiVersions response that carries an error as v0 (so a client
        # can read the broker's versions whatever it asked for); the sample must not.
        data["error_code"] = 0
    ours = message.encode(data, version)
    assert normalise(message.decode(ours, version)) == normalise(data)
    cls = kafka_python_class(message)
    if cls is None:
        # kio reads error codes into an enum of the codes Kafka defines: give it real ones.
        data = _real_error_codes(data)
        _cross_check_kio(message, version, data, message.encode(data, version))
        return
    theirs = cls.decode(ours, version=version)
    if not hasattr(theirs, "_header"):
        theirs._header = None  # kafka-python leaves this slot unset on decode
    again = theirs.encode(version=version)
    assert bytes(again).hex() == ours.hex(), f"{message.name} {message.kind} v{version}"
    # Same bytes after their decode/encode is not enough on its own (any parse round-trips):
    # their decoded values must equal ours field by field.
    # json=False: keep bytes as bytes (kafka-python's default renders them as text).
    same_values(
        normalise(theirs.to_dict(json=False)), normalise(data), f"{message.name} v{version}"
    )


def same_values(theirs: Any, ours: Any, where: str) -> None:
    if isinstance(ours, dict):
        assert isinstance(theirs, dict), where
        for key, value in ours.items():
            if key.endswith("authorized_operations"):
                continue  # kafka-python renders these bit sets as lists of operations
            assert key in theirs, f"{where}: kafka-python has no field {key}"
            same_values(theirs[key], value, f"{where}.{key}")
    elif isinstance(ours, list):
        assert isinstance(theirs, list) and len(theirs) == len(ours), where
        for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            same_values(a, b, f"{where}[{i}]")
    elif isinstance(ours, uuid.UUID):
        assert str(theirs) == str(ours), where
    else:
        assert theirs == ours, f"{where}: kafka-python {theirs!r} != ours {ours!r}"


def _cross_check_kio(message: Message, version: int, data: dict[str, Any], ours: bytes) -> None:
    """kio reads our bytes into its dataclass and writes them back: the same bytes, and
    the same values field by field (kio drops the ``_ms`` of durations, as timedeltas)."""
    import dataclasses
    import datetime
    import io

    from kio.serial import entity_reader, entity_writer

    cls = kio_class(message, version)
    theirs, consumed = entity_reader(cls)(memoryview(ours), 0)
    assert consumed == len(ours), f"{message.name} v{version}: kio read {consumed} bytes"
    out = io.BytesIO()
    entity_writer(cls)(out, theirs)
    assert out.getvalue().hex() == ours.hex(), f"{message.name} {message.kind} v{version}"

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: plain(getattr(value, f.name))
                for f in dataclasses.fields(value)
                if not f.name.startswith("__")
            }
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, datetime.timedelta):
            return int(value / datetime.timedelta(milliseconds=1))
        if isinstance(value, int):
            return int(value)  # kio's int subclasses and error-code enums
        return value

    def renamed(value: Any) -> Any:
        if isinstance(value, dict):
            return {(k[:-3] if k.endswith("_ms") else k): renamed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [renamed(v) for v in value]
        return value

    same_values(plain(theirs), renamed(normalise(data)), f"{message.name} v{version} (kio)")


def _real_error_codes(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (69 if k == "error_code" else _real_error_codes(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_real_error_codes(v) for v in value]
    return value
