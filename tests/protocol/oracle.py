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
    if (
        cls is not None
        and version < cls.valid_versions[0]
        and aiokafka_class(message, version) is not None
    ):
        # A version Kafka 4 dropped (KIP-896): kafka-python and kio generate their classes
        # from Kafka 4's definitions (which keep the fields' old version ranges, so they
        # still encode most old versions), and aiokafka's classes were written for the
        # old versions: where it has one, it is the oracle.
        _cross_check_aiokafka(message, version, data, ours)
        return
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


_AIOKAFKA_NAMES = {"ListOffsets": "Offset", "SaslHandshake": "SaslHandShake"}


def aiokafka_class(message: Message, version: int) -> Any:
    """aiokafka's class for one version of the message (``<Name>Request_v<N>``), or None."""
    name = _AIOKAFKA_NAMES.get(message.name, message.name)
    wanted = f"{name}{_KP_CLASSES[message.kind].format(name='')}_v{version}"
    for sub in ("admin", "commit", "offset", "fetch", "produce", "metadata", "group"):
        module = importlib.import_module(f"aiokafka.protocol.{sub}")
        if hasattr(module, wanted):
            return getattr(module, wanted)
    return None


def _leaves_of_ours(fields: tuple[Field, ...], data: Any, version: int) -> list[Any]:
    """Our values in wire order, flattened (names differ between codecs; order and values
    must not)."""
    out: list[Any] = []
    for f in fields:
        if not in_range(version, f.versions):
            continue
        out.extend(_value_leaves(f.type, data[f.name], version))
    return out


def _value_leaves(t: Any, value: Any, version: int) -> list[Any]:
    if isinstance(t, Array):
        if value is None:
            return [None]
        return [leaf for item in value for leaf in _value_leaves(t.element, item, version)]
    if isinstance(t, Struct):
        return _leaves_of_ours(t.fields, value, version)
    return [value]


def _leaves_of_theirs(value: Any) -> list[Any]:
    from aiokafka.protocol.struct import Struct as AioStruct

    if isinstance(value, AioStruct):
        return [leaf for n in value.SCHEMA.names for leaf in _leaves_of_theirs(value.get_item(n))]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _leaves_of_theirs(item)]
    return [value]


def _cross_check_aiokafka(
    message: Message, version: int, data: dict[str, Any], ours: bytes
) -> None:
    """aiokafka reads our bytes (all of them) and writes them back unchanged, and the
    values it read are ours, in wire order."""
    import io

    cls = aiokafka_class(message, version)
    assert cls is not None, f"no oracle for {message.name} {message.kind} v{version}"
    buf = io.BytesIO(ours)
    theirs = cls.decode(buf)
    assert buf.tell() == len(ours), f"{message.name} v{version}: aiokafka read {buf.tell()}"
    assert theirs.encode().hex() == ours.hex(), f"{message.name} {message.kind} v{version}"
    mine = _leaves_of_ours(message.fields, data, version)
    assert _leaves_of_theirs(theirs) == mine, f"{message.name} {message.kind} v{version}"


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
