"""Kafka Connect's data model: schemas, structs and the records connectors exchange.

The same model as Kafka Connect's ``org.apache.kafka.connect.data`` (types, optional
schemas, defaults, names and parameters; the logical types Decimal, Date, Time and
Timestamp), so that JSON with schemas written by Kafka Connect's ``JsonConverter`` reads
here and the other way round, and single message transforms mean what their Kafka names
say. Values are plain Python: ``int`` for the integer types, ``float``, ``bool``, ``str``,
``bytes``, ``list``, ``dict``, :class:`Struct`, and for the logical types ``decimal.Decimal``,
``datetime.date``, ``datetime.time`` and ``datetime.datetime`` (UTC).

Schemas are immutable and hashable; a :class:`Struct` is mutable until handed on (as in
Kafka, transforms build new ones).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
from collections.abc import Iterable, Mapping
from typing import Any


class DataException(ValueError):
    """A value does not fit its schema, or a schema is malformed (Kafka's DataException)."""


class Type(enum.Enum):
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    BOOLEAN = "boolean"
    STRING = "string"
    BYTES = "bytes"
    ARRAY = "array"
    MAP = "map"
    STRUCT = "struct"

    @property
    def primitive(self) -> bool:
        return self not in (Type.ARRAY, Type.MAP, Type.STRUCT)


_INT_BOUNDS = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DECIMAL_SCALE = "scale"
_LOGICAL_TYPE = {DECIMAL: Type.BYTES, DATE: Type.INT32, TIME: Type.INT32, TIMESTAMP: Type.INT64}


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    index: int
    schema: Schema


@dataclasses.dataclass(frozen=True)
class Schema:
    type: Type
    optional: bool = False
    default: Any = None
    name: str | None = None
    version: int | None = None
    doc: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()
    fields: tuple[Field, ...] = ()  # STRUCT
    key_schema: Schema | None = None  # MAP
    value_schema: Schema | None = None  # MAP values, ARRAY elements

    def __post_init__(self) -> None:
        if self.type is Type.ARRAY and self.value_schema is None:
            raise DataException("an array schema needs an element schema")
        if self.type is Type.MAP and (self.key_schema is None or self.value_schema is None):
            raise DataException("a map schema needs a key and a value schema")
        if self.name in _LOGICAL_TYPE and _LOGICAL_TYPE[self.name] is not self.type:
            raise DataException(f"{self.name} is a logical type of {_LOGICAL_TYPE[self.name]}")
        if self.default is not None:
            validate(self, self.default)

    # --- STRUCT ---------------------------------------------------------------------------

    def field(self, name: str) -> Field | None:
        if self.type is not Type.STRUCT:
            raise DataException(f"a {self.type.value} schema has no fields")
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def params(self) -> dict[str, str]:
        return dict(self.parameters)

    def as_optional(self) -> Schema:
        return dataclasses.replace(self, optional=True)


def struct_schema(
    fields: Iterable[tuple[str, Schema]], *, name: str | None = None, optional: bool = False
) -> Schema:
    """A STRUCT schema with ``fields`` in order (names unique)."""
    built: list[Field] = []
    for index, (field_name, schema) in enumerate(fields):
        if any(f.name == field_name for f in built):
            raise DataException(f"duplicate field {field_name!r}")
        built.append(Field(field_name, index, schema))
    return Schema(Type.STRUCT, optional=optional, name=name, fields=tuple(built))


def decimal_schema(scale: int, optional: bool = False) -> Schema:
    return Schema(
        Type.BYTES, optional=optional, name=DECIMAL, version=1,
        parameters=((DECIMAL_SCALE, str(scale)),),
    )  # fmt: skip


def _primitive(type_: Type) -> Schema:
    return Schema(type_)


INT8_SCHEMA, INT16_SCHEMA = _primitive(Type.INT8), _primitive(Type.INT16)
INT32_SCHEMA, INT64_SCHEMA = _primitive(Type.INT32), _primitive(Type.INT64)
FLOAT32_SCHEMA, FLOAT64_SCHEMA = _primitive(Type.FLOAT32), _primitive(Type.FLOAT64)
BOOLEAN_SCHEMA, STRING_SCHEMA = _primitive(Type.BOOLEAN), _primitive(Type.STRING)
BYTES_SCHEMA = _primitive(Type.BYTES)
OPTIONAL_STRING_SCHEMA = Schema(Type.STRING, optional=True)
OPTIONAL_INT64_SCHEMA = Schema(Type.INT64, optional=True)
OPTIONAL_BYTES_SCHEMA = Schema(Type.BYTES, optional=True)
DATE_SCHEMA = Schema(Type.INT32, name=DATE, version=1)
TIME_SCHEMA = Schema(Type.INT32, name=TIME, version=1)
TIMESTAMP_SCHEMA = Schema(Type.INT64, name=TIMESTAMP, version=1)


class Struct:
    """A value of a STRUCT schema: field values by name, checked against the schema."""

    __slots__ = ("_values", "schema")

    def __init__(self, schema: Schema, values: Mapping[str, Any] | None = None) -> None:
        if schema.type is not Type.STRUCT:
            raise DataException(f"a Struct needs a struct schema, not {schema.type.value}")
        self.schema = schema
        self._values: dict[str, Any] = {}
        for name, value in (values or {}).items():
            self.put(name, value)

    @classmethod
    def trusted(cls, schema: Schema, values: dict[str, Any]) -> Struct:
        """A struct of values its maker guarantees fit the schema (a connector building
        many records of one schema); nothing is checked, so a mistake surfaces only in the
        converter."""
        made = cls.__new__(cls)
        made.schema = schema
        made._values = values
        return made

    def _field(self, name: str) -> Field:
        found = self.schema.field(name)
        if found is None:
            raise DataException(f"{name!r} is not a field of {self.schema.name or 'the struct'}")
        return found

    def put(self, name: str, value: Any) -> Struct:
        validate(self._field(name).schema, value, name)
        self._values[name] = value
        return self

    def get(self, name: str) -> Any:
        field = self._field(name)
        value = self._values.get(name)
        return field.schema.default if value is None else value

    def get_without_default(self, name: str) -> Any:
        """The value set, None where none was (Kafka's ``getWithoutDefault``)."""
        self._field(name)
        return self._values.get(name)

    def values_without_default(self) -> Mapping[str, Any]:
        """The values set, by field name (read-only; a converter's fast path)."""
        return self._values

    def validate(self) -> None:
        """Every field holds a value its schema allows (required ones set)."""
        for field in self.schema.fields:
            validate(field.schema, self.get(field.name), field.name)

    def as_dict(self) -> dict[str, Any]:
        """Every field's value, its default where none was set."""
        values = self._values
        return {
            f.name: f.schema.default if (v := values.get(f.name)) is None else v
            for f in self.schema.fields
        }

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Struct)
            and self.schema == other.schema
            and self.as_dict() == other.as_dict()
        )

    def __hash__(self) -> int:  # pragma: no cover - structs are not dict keys in practice
        return hash((self.schema, tuple(sorted(self.as_dict().items(), key=lambda kv: kv[0]))))

    def __repr__(self) -> str:
        return f"Struct({self.as_dict()!r})"


def validate(schema: Schema, value: Any, where: str | None = None) -> None:
    """Raise :class:`DataException` unless ``value`` fits ``schema``."""
    label = f"field {where!r}" if where else "value"
    if value is None:
        if schema.optional or schema.default is not None:
            return
        raise DataException(f"{label}: a required {schema.type.value} is null")
    name = schema.name
    if name == DECIMAL:
        ok = isinstance(value, decimal.Decimal)
    elif name == DATE:
        ok = isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    elif name == TIME:
        ok = isinstance(value, datetime.time)
    elif name == TIMESTAMP:
        ok = isinstance(value, datetime.datetime)
    else:
        ok = _fits(schema, value, label)
    if not ok:
        raise DataException(
            f"{label}: {type(value).__name__} is not a valid {name or schema.type.value}"
        )


def _fits(schema: Schema, value: Any, label: str) -> bool:
    t = schema.type
    if t in _INT_BOUNDS:
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        low, high = _INT_BOUNDS[t]
        if not low <= value <= high:
            raise DataException(f"{label}: {value} is out of range for {t.value}")
        return True
    if t in (Type.FLOAT32, Type.FLOAT64):
        return isinstance(value, float | int) and not isinstance(value, bool)
    if t is Type.BOOLEAN:
        return isinstance(value, bool)
    if t is Type.STRING:
        return isinstance(value, str)
    if t is Type.BYTES:
        return isinstance(value, bytes | bytearray | memoryview)
    if t is Type.ARRAY:
        if not isinstance(value, list | tuple):
            return False
        assert schema.value_schema is not None
        for item in value:
            validate(schema.value_schema, item, label)
        return True
    if t is Type.MAP:
        if not isinstance(value, Mapping):
            return False
        assert schema.key_schema is not None and schema.value_schema is not None
        for k, v in value.items():
            validate(schema.key_schema, k, label)
            validate(schema.value_schema, v, label)
        return True
    if t is Type.STRUCT:
        if not isinstance(value, Struct):
            return False
        if value.schema != schema:
            raise DataException(f"{label}: the struct's schema is not the field's schema")
        value.validate()
        return True
    return False  # pragma: no cover


Header = tuple[str, bytes | None]


@dataclasses.dataclass(frozen=True)
class ConnectRecord:
    """A record between a connector, the transforms and the converters.

    Source records carry the connector's ``source_partition`` / ``source_offset`` (what
    the worker commits once the record is acknowledged); sink records carry the Kafka
    coordinates they were read at (``kafka_offset``; ``partition`` is the Kafka
    partition). ``partition`` None on a source record lets the producer choose.
    ``timestamp`` is milliseconds since the epoch, or None.
    """

    topic: str
    partition: int | None
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    timestamp: int | None = None
    headers: tuple[Header, ...] = ()
    source_partition: Mapping[str, Any] | None = None
    source_offset: Mapping[str, Any] | None = None
    kafka_offset: int | None = None

    def new_record(self, **changes: Any) -> ConnectRecord:
        """A copy with ``changes`` (Kafka's ``newRecord``)."""
        return dataclasses.replace(self, **changes)

    def header(self, name: str) -> bytes | None:
        """The last header called ``name`` (None if absent or null)."""
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None
