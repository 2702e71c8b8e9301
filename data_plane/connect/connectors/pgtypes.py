"""Postgres column types as Debezium's Postgres connector presents them to Connect.

Values arrive in Postgres's text output form (from ``pgoutput`` and from ``COPY ...
TO STDOUT`` alike; the connection runs with ``DateStyle=ISO``, ``TimeZone=UTC``,
``IntervalStyle=postgres`` and ``extra_float_digits=3``), and leave as the Connect
value of the schema Debezium gives the type with its default modes
(``time.precision.mode=adaptive``, ``binary.handling.mode=bytes``,
``decimal.handling.mode`` ``precise``/``double``/``string``):

========================  ===========================================================
boolean                   BOOLEAN
smallint/integer/bigint   INT16 / INT32 / INT64 (oid: INT64)
real/double precision     FLOAT32 / FLOAT64
numeric(p,s)              ``org.apache.kafka.connect.data.Decimal`` (scale s); without
                          a scale ``io.debezium.data.VariableScaleDecimal``
                          (struct scale, value); or FLOAT64 / STRING by the mode
text/varchar/char/name    STRING
uuid, json(b), xml        STRING named ``io.debezium.data.Uuid`` / ``Json`` / ``Xml``
date                      INT32 ``io.debezium.time.Date`` (days since 1970-01-01)
time(p)                   INT32 ``io.debezium.time.Time`` (ms) for p ≤ 3, else INT64
                          ``io.debezium.time.MicroTime`` (µs)
timestamp(p)              INT64 ``io.debezium.time.Timestamp`` (ms) for p ≤ 3, else
                          ``io.debezium.time.MicroTimestamp`` (µs since 1970-01-01)
timestamptz / timetz      STRING ``io.debezium.time.ZonedTimestamp`` / ``ZonedTime``
                          (ISO-8601 in UTC)
interval                  INT64 ``io.debezium.time.MicroDuration`` (µs; a month as
                          30 days)
bytea                     BYTES
anything else             STRING (the text form), e.g. arrays, enums, inet
========================  ===========================================================

``infinity`` dates and timestamps become the largest and smallest values of their
type, as Debezium's do.
"""

from __future__ import annotations

import datetime
import decimal
import re
from collections.abc import Callable
from typing import Any

from data_plane.connect.data import DECIMAL, DECIMAL_SCALE, Schema, Struct, Type, struct_schema

Convert = Callable[[str], Any]

BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 19, 20, 21, 23, 25, 26
JSON, XML, FLOAT4, FLOAT8, BPCHAR, VARCHAR = 114, 142, 700, 701, 1042, 1043
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1082, 1083, 1114, 1184, 1186, 1266
NUMERIC, UUID, JSONB = 1700, 2950, 3802

_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_US = datetime.timedelta(microseconds=1)
_LONG_MAX, _LONG_MIN = 2**63 - 1, -(2**63)
_INT_MAX, _INT_MIN = 2**31 - 1, -(2**31)

VARIABLE_SCALE_DECIMAL = struct_schema(
    [("scale", Schema(Type.INT32)), ("value", Schema(Type.BYTES))],
    name="io.debezium.data.VariableScaleDecimal",
)


def _named(type_: Type, name: str, optional: bool) -> Schema:
    return Schema(type_, optional=optional, name=name, version=1)


def _precision(modifier: int) -> int:
    """The fractional-second digits of a time/timestamp column (6 when unset)."""
    return 6 if modifier < 0 else modifier


def _numeric_scale(modifier: int) -> int | None:
    return None if modifier < 4 else (modifier - 4) & 0xFFFF


def schema_for(type_oid: int, modifier: int, optional: bool, decimal_mode: str) -> Schema:
    """The Connect schema of a column of this type."""
    simple = _SIMPLE.get(type_oid)
    if simple is not None:
        return Schema(simple, optional=optional)
    if type_oid == NUMERIC:
        if decimal_mode == "double":
            return Schema(Type.FLOAT64, optional=optional)
        if decimal_mode == "string":
            return Schema(Type.STRING, optional=optional)
        scale = _numeric_scale(modifier)
        if scale is None:
            return VARIABLE_SCALE_DECIMAL.as_optional() if optional else VARIABLE_SCALE_DECIMAL
        return Schema(Type.BYTES, optional=optional, name=DECIMAL, version=1,
                      parameters=((DECIMAL_SCALE, str(scale)),))  # fmt: skip
    if type_oid == DATE:
        return _named(Type.INT32, "io.debezium.time.Date", optional)
    if type_oid == TIME:
        if _precision(modifier) <= 3:
            return _named(Type.INT32, "io.debezium.time.Time", optional)
        return _named(Type.INT64, "io.debezium.time.MicroTime", optional)
    if type_oid == TIMESTAMP:
        if _precision(modifier) <= 3:
            return _named(Type.INT64, "io.debezium.time.Timestamp", optional)
        return _named(Type.INT64, "io.debezium.time.MicroTimestamp", optional)
    named = _NAMED_STRINGS.get(type_oid)
    if named is not None:
        return _named(Type.STRING, named, optional)
    if type_oid == INTERVAL:
        return _named(Type.INT64, "io.debezium.time.MicroDuration", optional)
    return Schema(Type.STRING, optional=optional)


_SIMPLE = {
    BOOL: Type.BOOLEAN, INT2: Type.INT16, INT4: Type.INT32, INT8: Type.INT64, OID: Type.INT64,
    FLOAT4: Type.FLOAT32, FLOAT8: Type.FLOAT64, BYTEA: Type.BYTES,
    TEXT: Type.STRING, VARCHAR: Type.STRING, BPCHAR: Type.STRING, NAME: Type.STRING,
}  # fmt: skip
_NAMED_STRINGS = {
    UUID: "io.debezium.data.Uuid", JSON: "io.debezium.data.Json",
    JSONB: "io.debezium.data.Json", XML: "io.debezium.data.Xml",
    TIMESTAMPTZ: "io.debezium.time.ZonedTimestamp", TIMETZ: "io.debezium.time.ZonedTime",
}  # fmt: skip


# --- values ---------------------------------------------------------------------------------


def _bool(text: str) -> bool:
    return text == "t"


def _float(text: str) -> float:
    return float(text)  # "NaN", "Infinity" and "-Infinity" parse as Python spells them


def _bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    return _bytea_escape(text)


def _bytea_escape(text: str) -> bytes:
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if text[i + 1] == "\\":
                out.append(0x5C)
                i += 2
            else:
                out.append(int(text[i + 1 : i + 4], 8))
                i += 4
        else:
            out.extend(c.encode("utf-8"))
            i += 1
    return bytes(out)


def _date(text: str) -> int:
    if text == "infinity":
        return _INT_MAX
    if text == "-infinity":
        return _INT_MIN
    return (datetime.date.fromisoformat(text) - _EPOCH_DATE).days


def _timestamp_us(text: str) -> int:
    if text == "infinity":
        return _LONG_MAX
    if text == "-infinity":
        return _LONG_MIN
    return (datetime.datetime.fromisoformat(text) - _EPOCH) // _US


def _timestamp_ms(text: str) -> int:
    value = _timestamp_us(text)
    return value if value in (_LONG_MAX, _LONG_MIN) else value // 1000


def _time_us(text: str) -> int:
    if text.startswith("24:00:00"):
        return 86_400_000_000
    moment = datetime.time.fromisoformat(text)
    seconds = (moment.hour * 60 + moment.minute) * 60 + moment.second
    return seconds * 1_000_000 + moment.microsecond


def _zoned_timestamp(text: str) -> str:
    """ISO-8601 in UTC as Java's ``ISO_OFFSET_DATE_TIME`` writes it (fraction digits as
    needed). The session's TimeZone is UTC, so Postgres writes ``... hh:mm:ss[.f]+00``."""
    if text.endswith("+00") and len(text) >= 22 and text[10] == " " and text[4] == "-":
        return f"{text[:10]}T{text[11:-3]}Z"
    if text in ("infinity", "-infinity"):
        return text
    moment = datetime.datetime.fromisoformat(text).astimezone(datetime.UTC)
    written = moment.replace(tzinfo=None).isoformat()
    return (written.rstrip("0") if "." in written else written) + "Z"


def _zoned_time(text: str) -> str:
    moment = datetime.datetime.fromisoformat("2000-01-01T" + text).astimezone(datetime.UTC)
    return moment.time().isoformat() + "Z"


_INTERVAL = re.compile(
    r"(?:(?P<y>[+-]?\d+) years? ?)?(?:(?P<mo>[+-]?\d+) mons? ?)?(?:(?P<d>[+-]?\d+) days? ?)?"
    r"(?:(?P<sign>[+-])?(?P<h>\d+):(?P<mi>\d+):(?P<s>\d+(?:\.\d+)?))?$"
)


def _interval(text: str) -> int:
    match = _INTERVAL.match(text.strip())
    if match is None:
        raise ValueError(f"unreadable interval {text!r}")
    parts = match.groupdict()
    days = int(parts["y"] or 0) * 365.25 + int(parts["mo"] or 0) * 30 + int(parts["d"] or 0)
    micros = round(days * 86_400_000_000)
    if parts["h"] is not None:
        clock = (int(parts["h"]) * 3600 + int(parts["mi"]) * 60) * 1_000_000
        clock += round(decimal.Decimal(parts["s"]) * 1_000_000)
        micros += -clock if parts["sign"] == "-" else clock
    return micros


def _unscaled_bytes(value: decimal.Decimal) -> tuple[int, bytes]:
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return -exponent, unscaled.to_bytes(length, "big", signed=True)


def converter_for(type_oid: int, modifier: int, decimal_mode: str, optional: bool) -> Convert:
    """How to turn the text form of this type into its Connect value."""
    if type_oid in (INT2, INT4, INT8, OID):
        return int
    if type_oid == NUMERIC:
        if decimal_mode == "double":
            return float
        if decimal_mode == "string":
            return str
        if _numeric_scale(modifier) is None:
            schema = VARIABLE_SCALE_DECIMAL.as_optional() if optional else VARIABLE_SCALE_DECIMAL
            return lambda text: _variable_scale(text, schema)
        return decimal.Decimal
    simple: dict[int, Convert] = {
        BOOL: _bool, FLOAT4: _float, FLOAT8: _float, BYTEA: _bytea, DATE: _date,
        TIMESTAMPTZ: _zoned_timestamp, TIMETZ: _zoned_time, INTERVAL: _interval,
    }  # fmt: skip
    if type_oid in simple:
        return simple[type_oid]
    if type_oid == TIMESTAMP:
        return _timestamp_ms if _precision(modifier) <= 3 else _timestamp_us
    if type_oid == TIME:
        if _precision(modifier) <= 3:
            return lambda text: _time_us(text) // 1000
        return _time_us
    return str


def _variable_scale(text: str, schema: Schema = VARIABLE_SCALE_DECIMAL) -> Any:
    value = decimal.Decimal(text)
    if not value.is_finite():
        raise ValueError(f"numeric {text!r} has no decimal form (use decimal.handling.mode)")
    scale, unscaled = _unscaled_bytes(value)
    return Struct(schema, {"scale": scale, "value": unscaled})


_ZERO: dict[Type, Any] = {
    Type.BOOLEAN: False, Type.INT8: 0, Type.INT16: 0, Type.INT32: 0, Type.INT64: 0,
    Type.FLOAT32: 0.0, Type.FLOAT64: 0.0, Type.STRING: "", Type.BYTES: b"",
}  # fmt: skip


def placeholder(schema: Schema) -> Any:
    """What a required column not sent (a delete's non-key column) is filled with, as
    Debezium fills it: the type's zero value."""
    if schema.name == DECIMAL:
        return decimal.Decimal(0)
    if schema.type is Type.STRUCT:
        return _variable_scale("0", schema)
    return _ZERO.get(schema.type)
