"""Converters: Kafka Connect data to and from the bytes of Kafka record keys and values.

Kafka Connect's converters, configs and wire formats, so a topic written by Kafka Connect
reads here and the other way round:

* :class:`JsonConverter` (``org.apache.kafka.connect.json.JsonConverter``): UTF-8 JSON.
  With ``schemas.enable`` (the default) each record is the envelope
  ``{"schema":<schema>,"payload":<value>}``; without it, the payload alone.
* :class:`StringConverter` (``org.apache.kafka.connect.storage.StringConverter``): text in
  ``converter.encoding`` (UTF-8 by default).
* :class:`ByteArrayConverter` (``org.apache.kafka.connect.converters.ByteArrayConverter``):
  the bytes as they are.

A schema in JSON is an object with ``"type"`` (``boolean``, ``int8``, ``int16``,
``int32``, ``int64``, ``float`` (FLOAT32), ``double`` (FLOAT64), ``bytes``, ``string``,
``array``, ``map`` or ``struct``); then ``"items"`` (arrays), ``"keys"`` and ``"values"``
(maps) or ``"fields"`` (structs: each field's schema followed by its name in ``"field"``);
then ``"optional"`` and, where set, ``"name"``, ``"version"``, ``"doc"``,
``"parameters"`` (string values) and ``"default"`` (a payload of the schema), in that
order, written without spaces as Kafka's Jackson writer does.

Payloads: integers and booleans as JSON numbers and booleans; floats as Java's
``Double.toString``/``Float.toString`` spell them (``1.5``, ``1.0E10``; NaN and the
infinities as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``); bytes as base64
strings; structs as objects; maps with STRING keys as objects, other maps as arrays of
``[key, value]`` pairs; Decimal as base64 of the unscaled value's minimal two's-complement
big-endian bytes (``decimal.format=BASE64``: 12.34 at scale 2 is ``"BNI="``) or a JSON
number (``NUMERIC``: ``12.34``); Date as days since 1970-01-01, Time as milliseconds since
midnight UTC, Timestamp as milliseconds since the epoch.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import contextlib
import dataclasses
import datetime
import decimal
import json
import math
import struct
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import orjson

from data_plane.connect.config import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConfigType,
    Importance,
    one_of,
)
from data_plane.connect.data import (
    DATE,
    DECIMAL,
    DECIMAL_SCALE,
    OPTIONAL_BYTES_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    TIME,
    TIMESTAMP,
    DataException,
    Schema,
    Struct,
    Type,
    struct_schema,
)


class Converter(Protocol):
    """Kafka Connect's ``Converter``: one instance converts record keys, or values."""

    config_def: ClassVar[ConfigDef]

    def configure(self, config: Mapping[str, Any], is_key: bool) -> None: ...

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None: ...

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]: ...


def _check_encoding(name: str, value: Any) -> None:
    try:
        codecs.lookup(str(value))
    except LookupError:
        raise ConfigException(name, f"unsupported encoding {value!r}") from None


_TYPE_KEY = ConfigKey(
    "converter.type", ConfigType.STRING, importance=Importance.LOW,
    validator=one_of("key", "value", "header"), doc="key, value or header (set by the worker)",
)  # fmt: skip
JSON_CONFIG_DEF = ConfigDef([
    _TYPE_KEY,
    ConfigKey("schemas.enable", ConfigType.BOOLEAN, True, Importance.HIGH, group="Schemas",
              doc='write and require the {"schema": ..., "payload": ...} envelope'),
    ConfigKey("schemas.cache.size", ConfigType.INT, 1000, Importance.HIGH, group="Schemas",
              doc="accepted for compatibility (schemas are not cached)"),
    ConfigKey("decimal.format", ConfigType.STRING, "BASE64", Importance.LOW,
              validator=one_of("BASE64", "NUMERIC"), group="Serialization",
              doc="decimals as base64 of their unscaled bytes (BASE64) or JSON numbers"),
    ConfigKey("replace.null.with.default", ConfigType.BOOLEAN, True, Importance.LOW,
              doc="write and read a null value as its schema's default"),
])  # fmt: skip
STRING_CONFIG_DEF = ConfigDef([
    _TYPE_KEY,
    ConfigKey("converter.encoding", ConfigType.STRING, "UTF8", Importance.HIGH,
              validator=_check_encoding, doc="the character set of the text"),
])  # fmt: skip
BYTE_ARRAY_CONFIG_DEF = ConfigDef([_TYPE_KEY])


def _parse(config_def: ConfigDef, config: Mapping[str, Any], is_key: bool) -> dict[str, Any]:
    # As Kafka's configure(configs, isKey): converter.type follows is_key.
    return config_def.parse({**config, "converter.type": "key" if is_key else "value"})


# --- JSON text as Kafka's Jackson writer spells it ------------------------------------------


class _Float32(float):
    """A FLOAT32 payload: written at float (not double) precision."""


_ESCAPES = {i: f"\\u{i:04X}" for i in range(32)} | {
    8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r", 34: '\\"', 92: "\\\\",
}  # fmt: skip


def _f32_digits(x: float) -> str:
    """The shortest decimal that reads back as the same float32."""
    packed = struct.pack(">f", x)
    single = struct.unpack(">f", packed)[0]
    for places in range(9):
        text = f"{single:.{places}e}"
        with contextlib.suppress(OverflowError):  # rounded up past the largest float32
            if struct.pack(">f", float(text)) == packed:
                return text
    return repr(single)  # pragma: no cover - 9 significant digits always suffice


def _java_float(x: float, single: bool) -> str:
    if math.isnan(x) or math.isinf(x):
        return '"NaN"' if math.isnan(x) else '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    exact = decimal.Decimal(_f32_digits(x) if single else repr(x)).normalize()
    if len(exact.as_tuple().digits) == 1:  # Java (JDK 19+): two digits at least, the closest
        exact = decimal.Decimal(f"{x:.1e}").normalize()
    if 1e-3 <= abs(x) < 1e7:
        text = format(exact, "f")
        return text if "." in text else f"{text}.0"
    sign, digits, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    return f"{'-' * sign}{mantissa[0]}.{mantissa[1:] or '0'}E{len(digits) - 1 + exponent}"


def _emit(node: Any, out: list[str]) -> None:
    if node is None or node is True or node is False:
        out.append("null" if node is None else "true" if node else "false")
    elif isinstance(node, str):
        out.append(f'"{node.translate(_ESCAPES)}"')
    elif isinstance(node, float):
        out.append(_java_float(node, isinstance(node, _Float32)))
    elif isinstance(node, int | decimal.Decimal):
        out.append(str(node))  # a Decimal as Java's BigDecimal.toString()
    elif isinstance(node, list):
        out.append("[")
        for i, item in enumerate(node):
            out.append("," if i else "")
            _emit(item, out)
        out.append("]")
    else:
        out.append("{")
        for i, (key, item) in enumerate(node.items()):
            out.append(f'{"," if i else ""}"{key.translate(_ESCAPES)}":')
            _emit(item, out)
        out.append("}")


def _dumps(node: Any) -> bytes:
    out: list[str] = []
    try:
        _emit(node, out)
        return "".join(out).encode("utf-8")
    except (ValueError, RecursionError) as exc:  # lone surrogates, huge ints, deep nesting
        raise DataException(f"Converting Kafka Connect data to byte[] failed: {exc}") from exc


def _fast_dumps(node: Any) -> bytes | None:
    """``node`` as :func:`_dumps` writes it, by orjson, or None where the two could
    differ: control characters (Jackson writes ``\\u001F``, orjson ``\\u001f``) and
    anything orjson refuses (a Decimal, an integer beyond 64 bits, a lone surrogate). The
    caller keeps floats to the range both spell alike."""
    try:
        data = orjson.dumps(node)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return None
    if b"\\u" in data:
        return None
    return data


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_float=decimal.Decimal, parse_constant=_reject_constant)


def _loads(data: bytes) -> Any:
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        return _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise DataException(
            f"Converting byte[] to Kafka Connect data failed due to serialization error: {exc}"
        ) from exc


# --- logical types --------------------------------------------------------------------------

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY = datetime.date(1970, 1, 1)
_INT_BOUNDS = {Type.INT8: 2**7, Type.INT16: 2**15, Type.INT32: 2**31, Type.INT64: 2**63}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _checked_int(type_: Type, value: int) -> int:
    if not -_INT_BOUNDS[type_] <= value < _INT_BOUNDS[type_]:
        raise DataException(f"{value} is out of range for {type_.value}")
    return value


def _scale(schema: Schema) -> int:
    try:
        return int(schema.params[DECIMAL_SCALE])
    except (KeyError, ValueError):
        raise DataException("Invalid Decimal schema: scale parameter not found.") from None


def _unscaled(value: decimal.Decimal, scale: int) -> int:
    """``value * 10**scale``, which must be whole: a Decimal of another exponent is
    rescaled when no digit is lost (Kafka requires the schema's exact scale)."""
    try:
        numerator, denominator = value.as_integer_ratio()  # exact
    except (ValueError, OverflowError):
        raise DataException(f"{value} is not a valid Decimal") from None
    if scale >= 0:
        unscaled, rest = divmod(numerator * 10**scale, denominator)
    else:
        unscaled, rest = divmod(numerator, denominator * 10**-scale)
    if rest:
        raise DataException(f"Decimal {value} has more digits than scale {scale}")
    return int(unscaled)


def _decimal(unscaled: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(f"{unscaled}E{-scale}")  # exact: no context rounding


def _decimal_to_json(value: decimal.Decimal, scale: int, numeric: bool) -> Any:
    unscaled = _unscaled(value, scale)
    if numeric:
        return _decimal(unscaled, scale)
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode("ascii")


def _logical_to_json(schema: Schema, value: Any, numeric_decimals: bool) -> Any:
    """Decimal: base64 of the unscaled bytes, or a number; Date: days since 1970-01-01;
    Time: ms since midnight (UTC; sub-millisecond digits dropped); Timestamp: ms since the
    epoch (a naive datetime is taken as UTC)."""
    name = schema.name
    if name == DECIMAL and isinstance(value, decimal.Decimal):
        return _decimal_to_json(value, _scale(schema), numeric_decimals)
    if (
        name == DATE
        and isinstance(value, datetime.date)
        and not isinstance(value, datetime.datetime)
    ):
        return (value - _EPOCH_DAY).days
    if name == TIME and isinstance(value, datetime.time):
        if value.utcoffset():
            raise DataException(f"Time {value} is not in UTC")
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        return seconds * 1000 + value.microsecond // 1000
    if name == TIMESTAMP and isinstance(value, datetime.datetime):
        moment: datetime.datetime = value
        delta = (moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)) - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    raise DataException(f"Invalid type for {str(name).rsplit('.', 1)[-1]}: {type(value)}")


def _logical_from_json(schema: Schema, node: Any) -> Any:
    """Decimal → ``Decimal`` (from a number or base64); Date → ``date``; Time → naive
    ``time`` (UTC); Timestamp → ``datetime`` in UTC."""
    name = schema.name or ""
    if name == DECIMAL and isinstance(node, str):
        try:
            raw = base64.b64decode(node, validate=True)
        except binascii.Error as exc:
            raise DataException("Invalid bytes for Decimal field") from exc
        if not raw:  # as Java's BigInteger: no bytes, no number
            raise DataException("Invalid bytes for Decimal field: empty")
        return _decimal(int.from_bytes(raw, "big", signed=True), _scale(schema))
    if name == DECIMAL and (_is_int(node) or isinstance(node, decimal.Decimal)):
        return _decimal(_unscaled(decimal.Decimal(node), _scale(schema)), _scale(schema))
    kind = name.rsplit(".", 1)[-1]
    if not _is_int(node):
        raise DataException(f"Invalid type for {kind}, underlying representation was {node!r}")
    value = _checked_int(schema.type, node)
    if name == TIME:
        if not 0 <= value < 86_400_000:
            raise DataException(f"Time values must be milliseconds from 0 to 86399999: {value}")
        seconds, millis = divmod(value, 1000)
        return datetime.time(seconds // 3600, seconds // 60 % 60, seconds % 60, millis * 1000)
    try:
        if name == DATE:
            return _EPOCH_DAY + datetime.timedelta(days=value)
        return _EPOCH + datetime.timedelta(milliseconds=value)
    except OverflowError:
        raise DataException(f"{kind} {value} is out of range") from None


# --- JsonConverter --------------------------------------------------------------------------

_LOGICAL = frozenset({DECIMAL, DATE, TIME, TIMESTAMP})
_JSON_TYPE_NAMES = {t: t.value for t in Type} | {Type.FLOAT32: "float", Type.FLOAT64: "double"}
_TYPES_BY_JSON_NAME = {name: t for t, name in _JSON_TYPE_NAMES.items()}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_ENVELOPE_ERROR = (
    'JsonConverter with schemas.enable requires "schema" and "payload" fields and may not '
    "contain additional fields. If you are trying to deserialize plain JSON data, set "
    "schemas.enable=false in your converter configuration."
)


def _contains_decimal(schema: Schema | None) -> bool:
    if schema is None:
        return False
    if schema.name == DECIMAL:
        return True
    return any(_contains_decimal(f.schema) for f in schema.fields) or any(
        _contains_decimal(part) for part in (schema.key_schema, schema.value_schema)
    )


def _plain(node: Any) -> Any:
    """Schemaless JSON as Python: objects → dict, arrays → list, numbers → int or float."""
    if isinstance(node, decimal.Decimal):
        return float(node)
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    return node


class JsonConverter:
    """JSON with or without Kafka's schema envelope (the wire format: the module docstring).

    A null value without a schema is a null record (a tombstone). With a schema, a null
    value is written as Kafka writes it: as the schema's default
    (``replace.null.with.default``) or, if the schema is optional, as a null payload:
    ``{"schema":{...},"payload":null}`` with ``schemas.enable``, else the bytes ``null``.
    """

    config_def: ClassVar[ConfigDef] = JSON_CONFIG_DEF

    def __init__(self) -> None:
        self.configure({}, is_key=False)

    def configure(self, config: Mapping[str, Any], is_key: bool) -> None:
        parsed = _parse(JSON_CONFIG_DEF, config, is_key)
        self.schemas_enable: bool = parsed["schemas.enable"]
        self.numeric_decimals: bool = parsed["decimal.format"].upper() == "NUMERIC"
        self.replace_null_with_default: bool = parsed["replace.null.with.default"]
        # Compiled writers and serialized schemas by the schema's identity (a connector
        # builds its records on a few schema objects; hashing a Schema, a frozen dataclass
        # hashed anew on each call, would cost as much as converting the value).
        # schemas.cache.size bounds it.
        self._cache_size: int = parsed["schemas.cache.size"]
        self._writers: dict[int, tuple[Schema, Callable[[Any], Any], bytes]] = {}
        self._read_schemas: dict[bytes, Schema] = {}
        self._decimals: dict[int, tuple[Schema, bool]] = {}
        # Reading: per topic, the last envelope's bytes up to its payload and the schema
        # they spell; compiled readers by the schema's identity.
        self._prefixes: dict[str, tuple[bytes, Schema]] = {}
        self._readers: dict[int, tuple[Schema, Callable[[Any], Any]]] = {}
        self._slow = False  # the value needs the exact (slow) writer: see _fast_float

    # --- Connect → bytes --------------------------------------------------------------------

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None:
            if value is None:
                return None
            payload = self._schemaless_to_json(value)
            return _dumps({"schema": None, "payload": payload} if self.schemas_enable else payload)
        write, schema_json = self._compiled(schema)
        self._slow = False
        payload = write(value)
        body = None if self._slow else _fast_dumps(payload)
        if body is None:
            body = _dumps(payload)
        if self.schemas_enable:
            return b'{"schema":' + schema_json + b',"payload":' + body + b"}"
        return body

    def _compiled(self, schema: Schema) -> tuple[Callable[[Any], Any], bytes]:
        found = self._writers.get(id(schema))
        if found is not None and found[0] is schema:
            return found[1], found[2]
        if len(self._writers) >= self._cache_size:
            self._writers.clear()
        write = self._writer(schema)
        schema_json = _dumps(self.schema_to_json(schema)) if self.schemas_enable else b""
        self._writers[id(schema)] = (schema, write, schema_json)
        return write, schema_json

    def _writer(self, schema: Schema) -> Callable[[Any], Any]:
        """A function writing values of ``schema`` as :meth:`_to_json` does, faster: the
        schema's decisions are taken once."""
        t = schema.type
        to_json = self._to_json
        exact: Callable[[Any], Any]
        if schema.name == DECIMAL and schema.default is None:
            try:
                scale = _scale(schema)
            except DataException:
                return lambda value: to_json(schema, value)  # which raises the error
            numeric = self.numeric_decimals

            def decimal_writer(value: Any) -> Any:
                if value.__class__ is decimal.Decimal:
                    return _decimal_to_json(value, scale, numeric)
                return to_json(schema, value)

            return decimal_writer
        if schema.name in _LOGICAL:
            return lambda value: to_json(schema, value)
        if schema.default is not None and t is not Type.STRUCT:
            import dataclasses as _dc

            plain = self._writer(_dc.replace(schema, default=None, optional=True))
            return lambda value: to_json(schema, None) if value is None else plain(value)
        if t is Type.STRUCT:
            fields = [(f.name, self._writer(f.schema)) for f in schema.fields]

            def exact(value: Any) -> Any:
                if not isinstance(value, Struct) or (
                    value.schema is not schema and value.schema != schema
                ):
                    return to_json(schema, value)  # the null and error cases
                values = value.values_without_default()
                return {name: write(values.get(name)) for name, write in fields}

            return exact
        if t is Type.STRING:
            return lambda value: value if value.__class__ is str else to_json(schema, value)
        if t in _INT_BOUNDS:
            low, high = -_INT_BOUNDS[t], _INT_BOUNDS[t]
            return lambda value: (
                value if value.__class__ is int and low <= value < high else to_json(schema, value)
            )
        if t is Type.BOOLEAN:
            return lambda value: value if value.__class__ is bool else to_json(schema, value)
        if t is Type.FLOAT64:

            def exact(value: Any) -> Any:
                if value.__class__ is float and (value == 0.0 or 1e-3 <= abs(value) < 1e7):
                    if value == 0.0 and math.copysign(1.0, value) < 0:
                        self._slow = True
                    return value
                self._slow = True
                return to_json(schema, value)

            return exact

        def other(value: Any) -> Any:
            if value is not None and t in (Type.FLOAT32, Type.MAP, Type.ARRAY):
                self._slow = True  # float32 digits; what a map or an array holds
            return to_json(schema, value)

        return other

    def schema_to_json(self, schema: Schema | None) -> dict[str, Any] | None:
        """``schema`` as the envelope's ``"schema"`` object (None for no schema)."""
        if schema is None:
            return None
        node: dict[str, Any] = {"type": _JSON_TYPE_NAMES[schema.type]}
        if schema.type is Type.ARRAY:
            node["items"] = self.schema_to_json(schema.value_schema)
        elif schema.type is Type.MAP:
            node["keys"] = self.schema_to_json(schema.key_schema)
            node["values"] = self.schema_to_json(schema.value_schema)
        elif schema.type is Type.STRUCT:
            node["fields"] = [
                {**(self.schema_to_json(f.schema) or {}), "field": f.name} for f in schema.fields
            ]
        node["optional"] = schema.optional
        for key, attribute in (("name", schema.name), ("version", schema.version)):
            if attribute is not None:
                node[key] = attribute
        if schema.doc is not None:
            node["doc"] = schema.doc
        if schema.parameters:
            node["parameters"] = dict(schema.parameters)
        if schema.default is not None:
            node["default"] = self._to_json(schema, schema.default)
        return node

    def _to_json(self, schema: Schema | None, value: Any) -> Any:
        if value is None:
            if schema is None:
                return None
            if schema.default is not None and self.replace_null_with_default:
                return self._to_json(schema, schema.default)
            if schema.optional:
                return None
            raise DataException(
                "Conversion error: null value for field that is required and has no default value"
            )
        if schema is None:
            return self._schemaless_to_json(value)
        if schema.name in _LOGICAL:
            return _logical_to_json(schema, value, self.numeric_decimals)
        t = schema.type
        if t in _INT_BOUNDS and _is_int(value):
            return _checked_int(t, value)
        if t in (Type.FLOAT32, Type.FLOAT64) and (_is_int(value) or isinstance(value, float)):
            try:
                if t is Type.FLOAT64:
                    return float(value)
                return _Float32(struct.unpack(">f", struct.pack(">f", value))[0])
            except OverflowError:
                raise DataException(f"{value} is out of range for {t.value}") from None
        if (t is Type.BOOLEAN and isinstance(value, bool)) or (
            t is Type.STRING and isinstance(value, str)
        ):
            return value
        if t is Type.BYTES and isinstance(value, bytes | bytearray | memoryview):
            return base64.b64encode(value).decode("ascii")
        if t is Type.ARRAY and isinstance(value, list | tuple):
            return [self._to_json(schema.value_schema, item) for item in value]
        if t is Type.MAP and isinstance(value, Mapping):
            key_schema, value_schema = schema.key_schema, schema.value_schema
            assert key_schema is not None
            pairs = [
                (self._to_json(key_schema, k), self._to_json(value_schema, v))
                for k, v in value.items()
            ]
            if key_schema.type is Type.STRING:  # as Jackson's asText(): a null key is "null"
                return {"null" if k is None else k: v for k, v in pairs}
            return [[k, v] for k, v in pairs]
        if t is Type.STRUCT and isinstance(value, Struct):
            if value.schema is not schema and value.schema != schema:
                raise DataException("Mismatching schema.")
            # Kafka reads fields with getWithoutDefault and lets _to_json apply defaults per
            # replace.null.with.default.
            return {
                f.name: self._to_json(f.schema, value.get_without_default(f.name))
                for f in schema.fields
            }
        raise DataException(f"Invalid type for {t.name}: {type(value)}")

    def _schemaless_to_json(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, bytes | bytearray | memoryview):
            return base64.b64encode(value).decode("ascii")
        if isinstance(value, list | tuple):
            return [self._schemaless_to_json(v) for v in value]
        if isinstance(value, Mapping):
            if all(isinstance(k, str) for k in value):
                return {k: self._schemaless_to_json(v) for k, v in value.items()}
            return [
                [self._schemaless_to_json(k), self._schemaless_to_json(v)] for k, v in value.items()
            ]
        if isinstance(value, Struct):
            raise DataException("Mismatching schema.")  # as Kafka: a struct needs its schema
        raise DataException(f"{type(value)} does not have a corresponding schema type.")

    # --- bytes → Connect --------------------------------------------------------------------

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        if not data:
            return None, None
        if self.schemas_enable:
            known = self._prefixes.get(topic)
            if known is not None and data.startswith(known[0]) and data.endswith(b"}"):
                # {"schema":<the schema seen before>,"payload":<P>}: only P is read. P
                # must be one whole JSON value, so the document is exactly that envelope.
                prefix, known_schema = known
                payload = data[len(prefix) : -1]
                try:
                    node = (
                        _loads(payload)
                        if self._has_decimal(known_schema)
                        else orjson.loads(payload)
                    )
                except (orjson.JSONDecodeError, DataException):
                    pass  # read the whole document below, for its error or its big integers
                else:
                    return known_schema, self._read(known_schema, node)
        # orjson reads numbers with a fraction as floats, the exact reader as Decimals:
        # the same values everywhere but in a Decimal field (read again exactly then).
        try:
            doc, exact = orjson.loads(data), False
        except orjson.JSONDecodeError:  # what orjson refuses, e.g. integers beyond 64 bits
            doc, exact = _loads(data), True
        if not self.schemas_enable:
            return None, _plain(doc)
        if not (isinstance(doc, dict) and len(doc) == 2 and "schema" in doc and "payload" in doc):
            raise DataException(_ENVELOPE_ERROR)
        schema = self.schema_from_json(doc["schema"])
        if not exact and schema is not None and self._has_decimal(schema):
            doc = _loads(data)
        if schema is None:
            return None, self._from_json(None, doc["payload"])
        value = self._read(schema, doc["payload"])
        self._remember_prefix(topic, data, doc["schema"], schema)
        return schema, value

    def _remember_prefix(self, topic: str, data: bytes, node: Any, schema: Schema) -> None:
        """Keep ``{"schema":<its bytes>,"payload":`` of a compact envelope whose schema
        part is exactly ``node``, so that the topic's next records skip reading it."""
        head = b'{"schema":'
        end = data.find(b',"payload":', len(head))
        if not data.startswith(head) or end < 0:
            return
        try:
            if orjson.loads(data[len(head) : end]) != node:
                return  # the marker was inside the schema: no shortcut for this shape
        except orjson.JSONDecodeError:
            return
        if len(self._prefixes) >= self._cache_size:
            self._prefixes.clear()
        self._prefixes[topic] = (data[: end + len(b',"payload":')], schema)

    def _read(self, schema: Schema, node: Any) -> Any:
        found = self._readers.get(id(schema))
        if found is None or found[0] is not schema:
            if len(self._readers) >= self._cache_size:
                self._readers.clear()
            found = (schema, self._reader(schema))
            self._readers[id(schema)] = found
        return found[1](node)

    def _reader(self, schema: Schema) -> Callable[[Any], Any]:
        """A function reading JSON nodes of ``schema`` as :meth:`_from_json` does,
        faster: the common cases are decided once, anything else goes to _from_json."""
        t = schema.type
        from_json = self._from_json
        if schema.name in _LOGICAL or schema.default is not None:
            return lambda node: from_json(schema, node)
        if t is Type.STRUCT:
            fields = [(f.name, self._reader(f.schema)) for f in schema.fields]

            def struct(node: Any) -> Any:
                if node.__class__ is not dict:
                    return from_json(schema, node)  # null, or the error
                get = node.get
                return Struct.trusted(schema, {name: read(get(name)) for name, read in fields})

            return struct
        if t is Type.STRING:
            return lambda node: node if node.__class__ is str else from_json(schema, node)
        if t in _INT_BOUNDS:
            low, high = -_INT_BOUNDS[t], _INT_BOUNDS[t]
            return lambda node: (
                node if node.__class__ is int and low <= node < high else from_json(schema, node)
            )
        if t is Type.FLOAT64:
            return lambda node: node if node.__class__ is float else from_json(schema, node)
        if t is Type.BOOLEAN:
            return lambda node: node if node.__class__ is bool else from_json(schema, node)
        return lambda node: from_json(schema, node)

    def _has_decimal(self, schema: Schema) -> bool:
        found = self._decimals.get(id(schema))
        if found is None or found[0] is not schema:
            found = (schema, _contains_decimal(schema))
            if len(self._decimals) >= self._cache_size:
                self._decimals.clear()
            self._decimals[id(schema)] = found
        return found[1]

    def schema_from_json(self, node: Any) -> Schema | None:
        """The schema an envelope's ``"schema"`` describes (None for ``null``)."""
        if node is None:
            return None
        # Records of one producer repeat one schema: parsed once, found again by its text.
        try:
            key = orjson.dumps(node, default=str)
        except TypeError:
            return self._schema(node)
        found = self._read_schemas.get(key)
        if found is None:
            found = self._schema(node)
            if len(self._read_schemas) >= self._cache_size:
                self._read_schemas.clear()
            self._read_schemas[key] = found
        return found

    def _schema(self, node: Any) -> Schema:
        kind = _TYPES_BY_JSON_NAME.get(str(node.get("type"))) if isinstance(node, dict) else None
        if kind is None:
            raise DataException(f"Schema must contain a known 'type' field: {node!r}")
        get = node.get
        parameters = get("parameters") if isinstance(get("parameters"), dict) else {}
        if not all(isinstance(v, str) for v in parameters.values()):
            raise DataException("Schema parameters must have string values.")
        schema = Schema(
            kind, optional=get("optional") is True,
            name=get("name") if isinstance(get("name"), str) else None,
            version=get("version") if _is_int(get("version")) else None,
            doc=get("doc") if isinstance(get("doc"), str) else None,
            parameters=tuple(parameters.items()), **self._children(kind, node),
        )  # fmt: skip
        if "default" in node:
            schema = dataclasses.replace(schema, default=self._from_json(schema, node["default"]))
        return schema

    def _children(self, kind: Type, node: dict[str, Any]) -> dict[str, Any]:
        parts = {Type.ARRAY: ("items",), Type.MAP: ("keys", "values")}.get(kind, ())
        for part in parts:
            if node.get(part) is None:
                raise DataException(f"{kind.value} schema did not specify its {part!r}")
        if kind is Type.ARRAY:
            return {"value_schema": self._schema(node["items"])}
        if kind is Type.MAP:
            return {
                "key_schema": self._schema(node["keys"]),
                "value_schema": self._schema(node["values"]),
            }
        if kind is not Type.STRUCT:
            return {}
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise DataException('Struct schema\'s "fields" argument is not an array.')
        named = []
        for field in fields:
            name = field.get("field") if isinstance(field, dict) else None
            if not isinstance(name, str):
                raise DataException("Struct schema's field name not specified properly")
            named.append((name, self._schema(field)))
        return {"fields": struct_schema(named).fields}

    def _from_json(self, schema: Schema | None, node: Any) -> Any:
        if schema is None:
            return _plain(node)
        if node is None:
            if schema.default is not None and self.replace_null_with_default:
                return schema.default
            if schema.optional:
                return None
            raise DataException(f"Invalid null value for required {schema.type.name} field")
        if schema.name in _LOGICAL:
            return _logical_from_json(schema, node)
        t = schema.type
        if t in _INT_BOUNDS and _is_int(node):
            return _checked_int(t, node)
        if t in (Type.FLOAT32, Type.FLOAT64):
            if _is_int(node) or isinstance(node, decimal.Decimal | float):
                return float(node)
            if isinstance(node, str) and node in _NON_FINITE:  # as Jackson writes NaN
                return _NON_FINITE[node]
        if (t is Type.BOOLEAN and isinstance(node, bool)) or (
            t is Type.STRING and isinstance(node, str)
        ):
            return node
        if t is Type.BYTES and isinstance(node, str):
            try:
                return base64.b64decode(node, validate=True)
            except binascii.Error as exc:
                raise DataException("Invalid bytes field") from exc
        if t is Type.ARRAY and isinstance(node, list):
            return [self._from_json(schema.value_schema, item) for item in node]
        if t is Type.MAP:
            return self._map_from_json(schema, node)
        if t is Type.STRUCT and isinstance(node, dict):  # keys that are not fields: ignored
            # Each value was just read against its field's schema: nothing to check again.
            return Struct.trusted(
                schema, {f.name: self._from_json(f.schema, node.get(f.name)) for f in schema.fields}
            )
        raise DataException(f"Invalid JSON for a {t.value} schema: {type(node).__name__}")

    def _map_from_json(self, schema: Schema, node: Any) -> dict[Any, Any]:
        key_schema, value_schema = schema.key_schema, schema.value_schema
        assert key_schema is not None
        if key_schema.type is Type.STRING:
            if not isinstance(node, dict):
                raise DataException("Maps with string fields should be encoded as JSON objects")
            return {k: self._from_json(value_schema, v) for k, v in node.items()}
        if not isinstance(node, list) or not all(isinstance(e, list) and len(e) == 2 for e in node):
            raise DataException("Maps with non-string keys should be JSON arrays of [key, value]")
        try:
            return {
                self._from_json(key_schema, k): self._from_json(value_schema, v) for k, v in node
            }
        except TypeError as exc:  # an array or map key: unhashable in Python
            raise DataException(f"Map keys of {key_schema.type.value} cannot be dict keys") from exc


# --- StringConverter and ByteArrayConverter -------------------------------------------------


class StringConverter:
    """``str(value)`` in ``converter.encoding``; reads back as an optional string.

    As Java's ``String`` does, characters the encoding lacks are written as ``?`` and
    malformed input reads as U+FFFD. The schema is not looked at.
    """

    config_def: ClassVar[ConfigDef] = STRING_CONFIG_DEF

    def __init__(self) -> None:
        self.configure({}, is_key=False)

    def configure(self, config: Mapping[str, Any], is_key: bool) -> None:
        encoding = _parse(STRING_CONFIG_DEF, config, is_key)["converter.encoding"]
        self.encoding: str = codecs.lookup(encoding).name

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        return None if value is None else str(value).encode(self.encoding, errors="replace")

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        text = None if data is None else bytes(data).decode(self.encoding, errors="replace")
        return OPTIONAL_STRING_SCHEMA, text


class ByteArrayConverter:
    """The value's bytes as they are (BYTES schemas only); reads back as optional bytes."""

    config_def: ClassVar[ConfigDef] = BYTE_ARRAY_CONFIG_DEF

    def configure(self, config: Mapping[str, Any], is_key: bool) -> None:
        _parse(BYTE_ARRAY_CONFIG_DEF, config, is_key)

    def from_connect(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is not None and schema.type is not Type.BYTES:
            raise DataException(f"Invalid schema type for ByteArrayConverter: {schema.type.name}")
        if value is None or isinstance(value, bytes | bytearray | memoryview):
            return None if value is None else bytes(value)
        raise DataException(f"ByteArrayConverter is not compatible with {type(value)}")

    def to_connect(self, topic: str, data: bytes | None) -> tuple[Schema | None, Any]:
        return OPTIONAL_BYTES_SCHEMA, data


# --- registry -------------------------------------------------------------------------------

CONVERTERS: dict[str, type[Converter]] = {
    "org.apache.kafka.connect.json.JsonConverter": JsonConverter,
    "org.apache.kafka.connect.storage.StringConverter": StringConverter,
    "org.apache.kafka.connect.converters.ByteArrayConverter": ByteArrayConverter,
}
_ALIASES = {name.rsplit(".", 1)[-1]: cls for name, cls in CONVERTERS.items()}


def converter_class(key: str, name: str) -> type[Converter]:
    """The converter the config ``key`` (e.g. ``value.converter``) names, by Kafka class
    name or short alias; :class:`ConfigException` naming ``key`` if there is none."""
    found = CONVERTERS.get(name.strip()) or _ALIASES.get(name.strip())
    if found is None:
        known = ", ".join(sorted(CONVERTERS))
        raise ConfigException(key, f"Class {name} could not be found (known: {known})")
    return found


def make_converter(key: str, name: str, config: Mapping[str, Any], is_key: bool) -> Converter:
    """The converter ``name``, configured; ``config`` holds its own keys (``schemas.enable``:
    the worker strips the ``<key>.`` prefix), and a bad one raises
    :class:`ConfigException` naming ``<key>.<config>`` (``value.converter.schemas.enable``)."""
    converter = converter_class(key, name)()
    try:
        converter.configure(config, is_key)
    except ConfigException as exc:
        raise ConfigException(f"{key}.{exc.name}", exc.message) from exc
    return converter
