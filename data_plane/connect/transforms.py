"""Kafka Connect's single message transforms (SMTs) and the chain a connector config builds.

Each transform is Kafka's ``org.apache.kafka.connect.transforms.<Name>`` (in ``$Key`` and
``$Value`` variants where Kafka has them) with the same config keys and meaning, on the
data model of :mod:`data_plane.connect.data`: with a schema the key or value is a
:class:`~data_plane.connect.data.Struct` and the transform derives a new schema (cached per
input schema); without one it is a ``dict``. A key or value that is not what a transform
needs raises :class:`~data_plane.connect.data.DataException`; a transform returns None to
drop the record (``Filter``).

:func:`build_chain` reads a connector config as Kafka Connect does::

    transforms=route,mask
    transforms.route.type=org.apache.kafka.connect.transforms.RegexRouter
    transforms.route.regex=(.*)-raw
    transforms.route.replacement=$1
    transforms.route.predicate=isRaw
    transforms.mask.type=MaskField$Value
    transforms.mask.fields=ssn
    predicates=isRaw
    predicates.isRaw.type=TopicNameMatches
    predicates.isRaw.pattern=.*-raw

and :func:`chain_errors` reports every bad key at once (for config validation).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal

from data_plane.connect.config import (
    NO_DEFAULT,
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConfigType,
    Importance,
    Validator,
    non_empty,
    one_of,
    parse_value,
)
from data_plane.connect.data import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    STRING_SCHEMA,
    TIMESTAMP_SCHEMA,
    ConnectRecord,
    DataException,
    Schema,
    Struct,
    Type,
    struct_schema,
)
from data_plane.connect.predicates import PREDICATES, Predicate, java_regex, regex_validator

__all__ = [
    "TRANSFORMS",
    "TransformChain",
    "TransformStage",
    "Transformation",
    "build_chain",
    "chain_errors",
]

TRANSFORM_PACKAGE = "org.apache.kafka.connect.transforms."
Side = Literal["key", "value"]
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# --- helpers ------------------------------------------------------------------------------


class _SchemaCache:
    """Derived schemas by input schema: a small LRU, as Kafka keeps one per transform."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._entries: OrderedDict[Schema, Schema] = OrderedDict()

    def get(self, schema: Schema, build: Callable[[Schema], Schema]) -> Schema:
        try:
            hit = self._entries.get(schema)
        except TypeError:  # an unhashable default value: derive every time
            return build(schema)
        if hit is not None:
            self._entries.move_to_end(schema)
            return hit
        built = self._entries[schema] = build(schema)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return built


def _derived_struct(base: Schema, fields: Iterable[tuple[str, Schema]]) -> Schema:
    """A struct schema of ``fields`` keeping ``base``'s name, version, doc, parameters and
    optionality (Kafka's ``SchemaUtil.copySchemaBasics``; a default is not carried over)."""
    built = struct_schema(fields, name=base.name, optional=base.optional)
    return dataclasses.replace(
        built, version=base.version, doc=base.doc, parameters=base.parameters
    )


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _require_struct(value: Any, purpose: str) -> Struct:
    if not isinstance(value, Struct):
        raise DataException(
            f"Only Struct objects supported for [{purpose}], found: {_type_name(value)}"
        )
    return value


def _require_map(value: Any, purpose: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DataException(
            f"Only Map objects supported in absence of schema for [{purpose}], "
            f"found: {_type_name(value)}"
        )
    return value


def _field_value(struct: Struct, name: str, with_default: bool = True) -> Any:
    """A field's value; with ``with_default`` False a null stays null (no schema default)."""
    return struct.get(name) if with_default else struct.get_without_default(name)


def _millis_to_datetime(millis: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=millis)


def _string(
    name: str,
    doc: str,
    default: Any = None,
    validator: Validator | None = None,
    importance: Importance = Importance.MEDIUM,
) -> ConfigKey:
    """A STRING config key (optional unless ``default`` is NO_DEFAULT)."""
    return ConfigKey(name, ConfigType.STRING, default, importance, doc, validator)


def _list(name: str, doc: str, default: Any = NO_DEFAULT) -> ConfigKey:
    """A LIST config key: required and non-empty unless it has a ``default``."""
    validator = non_empty if default is NO_DEFAULT else None
    return ConfigKey(name, ConfigType.LIST, default, Importance.HIGH, doc, validator)


_REPLACE_NULL = ConfigKey(
    "replace.null.with.default", ConfigType.BOOLEAN, True, Importance.MEDIUM,
    "Whether a null field with a schema default reads as the default (else it stays null).",
)  # fmt: skip


# --- base classes -------------------------------------------------------------------------


class Transformation:
    """A single message transform (Kafka's ``Transformation``): configure, apply, close."""

    config_def: ClassVar[ConfigDef] = ConfigDef()
    #: Deprecated config keys and the keys they stand for (the new key wins if both are set).
    deprecated_keys: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def translate(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` with deprecated keys moved to their current names."""
        out = dict(config)
        for old, new in cls.deprecated_keys.items():
            if old in out and out.get(new) is None:
                out[new] = out[old]
        return out

    def configure(self, config: Mapping[str, Any]) -> None:
        """Parse ``config`` (keys without the ``transforms.<alias>.`` prefix)."""
        self._configure(self.config_def.parse(self.translate(config)))

    def _configure(self, parsed: dict[str, Any]) -> None:
        """Take the typed config values (subclasses)."""

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        """The transformed record, or None to drop it."""
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (none by default)."""


class _KeyOrValue(Transformation):
    """A transform of the record key (``side = "key"``) or value (``"value"``)."""

    side: ClassVar[Side]

    def _schema(self, record: ConnectRecord) -> Schema | None:
        return record.key_schema if self.side == "key" else record.value_schema

    def _value(self, record: ConnectRecord) -> Any:
        return record.key if self.side == "key" else record.value

    def _with(self, record: ConnectRecord, schema: Schema | None, value: Any) -> ConnectRecord:
        if self.side == "key":
            return record.new_record(key_schema=schema, key=value)
        return record.new_record(value_schema=schema, value=value)


class _StructOrMap(_KeyOrValue):
    """A transform of a struct (with a schema) or a map (without); null passes through."""

    purpose: ClassVar[str] = ""

    def _configure(self, parsed: dict[str, Any]) -> None:
        self._cache = _SchemaCache()

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self._value(record)
        if value is None:
            return record
        if self._schema(record) is None:
            return self._with(
                record, None, self._schemaless(record, _require_map(value, self.purpose))
            )
        struct = _require_struct(value, self.purpose)
        schema = self._cache.get(struct.schema, self._derive)
        return self._with(record, schema, self._with_schema(record, struct, schema))

    def _schemaless(self, record: ConnectRecord, value: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def _derive(self, schema: Schema) -> Schema:
        raise NotImplementedError

    def _with_schema(self, record: ConnectRecord, value: Struct, schema: Schema) -> Any:
        raise NotImplementedError


# --- InsertField --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Insertion:
    name: str
    optional: bool

    @classmethod
    def parse(cls, spec: str | None) -> _Insertion | None:
        """``name`` or ``name?`` (optional, the default) or ``name!`` (required)."""
        if not spec:
            return None
        if spec.endswith("?"):
            return cls(spec[:-1], True)
        if spec.endswith("!"):
            return cls(spec[:-1], False)
        return cls(spec, True)


_FIELD_SUFFIX = " Suffix with ! to make this a required field, or ? to keep it optional."


class InsertField(_StructOrMap):
    """Insert the record's topic, partition, offset, timestamp or a static value as fields.

    A required field (``name!``) whose metadata the record lacks raises DataException; an
    optional one is null with a schema and left out without. ``offset.field`` reads the
    Kafka offset, which only sink records have.
    """

    purpose = "field insertion"
    config_def = ConfigDef(
        [
            *(
                _string(f"{what}.field", f"Field name for the {doc}.{_FIELD_SUFFIX}")
                for what, doc in [
                    ("topic", "topic"), ("partition", "partition"),
                    ("offset", "Kafka offset (sink connectors only)"),
                    ("timestamp", "record timestamp"), ("static", "static value"),
                ]
            ),
            _string("static.value", "The static field's value."),
            _REPLACE_NULL,
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        super()._configure(parsed)
        self.static_value: str | None = parsed["static.value"]
        self.replace_null: bool = parsed["replace.null.with.default"]
        specs = {
            what: _Insertion.parse(parsed[f"{what}.field"])
            for what in ("topic", "partition", "offset", "timestamp", "static")
        }
        self.insertions = {what: spec for what, spec in specs.items() if spec is not None}

    _SCHEMAS: ClassVar[dict[str, Schema]] = {
        "topic": STRING_SCHEMA, "partition": INT32_SCHEMA, "offset": INT64_SCHEMA,
        "timestamp": TIMESTAMP_SCHEMA, "static": STRING_SCHEMA,
    }  # fmt: skip

    def _inserted(self, record: ConnectRecord) -> list[tuple[str, _Insertion, Any]]:
        """(what, field, value) per configured field; the value None where it is missing."""
        found = {
            "topic": record.topic, "partition": record.partition,
            "offset": record.kafka_offset, "timestamp": record.timestamp,
            "static": self.static_value,
        }  # fmt: skip
        out = []
        for what, spec in self.insertions.items():
            value = found[what]
            if value is None and not spec.optional:
                detail = " (only sink records have one)" if what == "offset" else ""
                raise DataException(
                    f"InsertField: required field {spec.name!r} needs the record's {what}, "
                    f"which it lacks{detail}"
                )
            out.append((what, spec, value))
        return out

    def _schemaless(self, record: ConnectRecord, value: Mapping[str, Any]) -> Any:
        updated = dict(value)
        for _, spec, inserted in self._inserted(record):
            if inserted is not None:
                updated[spec.name] = inserted
        return updated

    def _derive(self, schema: Schema) -> Schema:
        added = [
            (spec.name, self._SCHEMAS[what].as_optional() if spec.optional else self._SCHEMAS[what])
            for what, spec in self.insertions.items()
        ]
        return _derived_struct(schema, [*((f.name, f.schema) for f in schema.fields), *added])

    def _with_schema(self, record: ConnectRecord, value: Struct, schema: Schema) -> Any:
        values = {
            f.name: _field_value(value, f.name, self.replace_null) for f in value.schema.fields
        }
        for what, spec, inserted in self._inserted(record):
            if what == "timestamp" and inserted is not None:
                inserted = _millis_to_datetime(inserted)
            values[spec.name] = inserted
        return Struct(schema, values)


class InsertFieldKey(InsertField):
    """``InsertField$Key``."""

    side = "key"


class InsertFieldValue(InsertField):
    """``InsertField$Value``."""

    side = "value"


# --- ReplaceField -------------------------------------------------------------------------


def _renames_validator(name: str, value: Any) -> None:
    for mapping in value:
        old, sep, new = mapping.partition(":")
        if not sep or not old or not new or ":" in new:
            raise ConfigException(name, f"invalid rename mapping {mapping!r}: expected old:new")


class ReplaceField(_StructOrMap):
    """Keep (``include``), drop (``exclude``) and rename (``renames``) fields.

    ``exclude`` takes precedence over ``include``; an empty ``include`` keeps every field.
    ``blacklist`` and ``whitelist`` are the deprecated names of ``exclude`` and ``include``.
    """

    purpose = "field replacement"
    deprecated_keys = {"blacklist": "exclude", "whitelist": "include"}
    config_def = ConfigDef(
        [
            _list("exclude", "Fields to exclude; takes precedence over include.", []),
            _list("include", "Fields to include; if set, only these are kept.", []),
            ConfigKey(
                "renames", ConfigType.LIST, [], Importance.MEDIUM,
                "Field rename mappings, e.g. foo:bar,abc:xyz.", _renames_validator,
            ),
            _REPLACE_NULL,
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        super()._configure(parsed)
        self.exclude = set(parsed["exclude"])
        self.include = set(parsed["include"])
        self.renames = dict(mapping.split(":", 1) for mapping in parsed["renames"])
        self.replace_null: bool = parsed["replace.null.with.default"]

    def _keep(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def _schemaless(self, record: ConnectRecord, value: Mapping[str, Any]) -> Any:
        return {self.renames.get(k, k): v for k, v in value.items() if self._keep(k)}

    def _derive(self, schema: Schema) -> Schema:
        kept = [
            (self.renames.get(f.name, f.name), f.schema)
            for f in schema.fields
            if self._keep(f.name)
        ]
        return _derived_struct(schema, kept)

    def _with_schema(self, record: ConnectRecord, value: Struct, schema: Schema) -> Any:
        return Struct(
            schema,
            {
                self.renames.get(f.name, f.name): _field_value(value, f.name, self.replace_null)
                for f in value.schema.fields
                if self._keep(f.name)
            },
        )


class ReplaceFieldKey(ReplaceField):
    """``ReplaceField$Key``."""

    side = "key"


class ReplaceFieldValue(ReplaceField):
    """``ReplaceField$Value``."""

    side = "value"


# --- MaskField ----------------------------------------------------------------------------


def _empty_like(value: Any) -> Any:
    """The "empty" value of ``value``'s type, as Kafka's MaskField masks without a
    replacement: 0, false, "", an empty list or map, the epoch for dates and times."""
    if isinstance(value, bool):
        return False
    for kind, empty in (
        (int, 0), (float, 0.0), (str, ""), (bytes | bytearray, b""),
        (decimal.Decimal, decimal.Decimal(0)), (list | tuple, []), (Mapping, {}),
    ):  # fmt: skip
        if isinstance(value, kind):
            return empty
    if isinstance(value, datetime.datetime):
        return _EPOCH if value.tzinfo else _EPOCH.replace(tzinfo=None)
    if isinstance(value, datetime.date):
        return _EPOCH.date()
    if isinstance(value, datetime.time):
        return datetime.time(0)
    raise DataException(f"Cannot mask value of type {type(value).__name__}")


def _replacement_like(value: Any, replacement: str) -> Any:
    """``replacement`` converted to ``value``'s type (numbers, strings and decimals)."""
    converters: tuple[tuple[type, Callable[[str], Any]], ...] = (
        (int, int), (float, float), (str, str), (decimal.Decimal, decimal.Decimal),
    )  # fmt: skip
    for kind, convert in () if isinstance(value, bool) else converters:
        if isinstance(value, kind):
            try:
                return convert(replacement)
            except (ValueError, decimal.InvalidOperation):
                raise DataException(
                    f"Unable to convert {replacement!r} to {type(value).__name__}"
                ) from None
    raise DataException(
        f"Cannot mask value of type {type(value).__name__} with a custom replacement"
    )


class MaskField(_StructOrMap):
    """Replace ``fields`` with their type's empty value, or with ``replacement`` (which must
    convert to the field's type: an int, float, decimal or string field)."""

    purpose = "mask fields"
    config_def = ConfigDef(
        [
            _list("fields", "Names of fields to mask."),
            _string("replacement", "Custom value replacement.", None, non_empty, Importance.LOW),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        super()._configure(parsed)
        self.fields = set(parsed["fields"])
        self.replacement: str | None = parsed["replacement"]

    def _masked(self, value: Any) -> Any:
        if value is None:
            return None
        if self.replacement is None:
            return _empty_like(value)
        return _replacement_like(value, self.replacement)

    def _schemaless(self, record: ConnectRecord, value: Mapping[str, Any]) -> Any:
        return {k: self._masked(v) if k in self.fields else v for k, v in value.items()}

    def _derive(self, schema: Schema) -> Schema:
        return schema

    def _with_schema(self, record: ConnectRecord, value: Struct, schema: Schema) -> Any:
        return Struct(
            schema,
            {
                f.name: self._masked(value.get(f.name))
                if f.name in self.fields
                else value.get(f.name)
                for f in schema.fields
            },
        )


class MaskFieldKey(MaskField):
    """``MaskField$Key``."""

    side = "key"


class MaskFieldValue(MaskField):
    """``MaskField$Value``."""

    side = "value"


# --- ValueToKey ---------------------------------------------------------------------------


class ValueToKey(Transformation):
    """Replace the key with a struct (or map) of ``fields`` of the value.

    A tombstone passes through unchanged (its key cannot be derived from a null value).
    """

    purpose = "copying fields from value to key"
    config_def = ConfigDef(
        [
            _list("fields", "Field names on the record value to extract as the record key."),
            _REPLACE_NULL,
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.fields: list[str] = parsed["fields"]
        self.replace_null: bool = parsed["replace.null.with.default"]
        self._cache = _SchemaCache()

    def _key_schema(self, schema: Schema) -> Schema:
        fields = []
        for name in self.fields:
            field = schema.field(name)
            if field is None:
                raise DataException(f"Field does not exist: {name}")
            fields.append((name, field.schema))
        return struct_schema(fields)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.value is None:
            return record
        if record.value_schema is None:
            value = _require_map(record.value, self.purpose)
            return record.new_record(key_schema=None, key={f: value.get(f) for f in self.fields})
        struct = _require_struct(record.value, self.purpose)
        schema = self._cache.get(struct.schema, self._key_schema)
        key = Struct(schema, {f: _field_value(struct, f, self.replace_null) for f in self.fields})
        return record.new_record(key_schema=schema, key=key)


# --- ExtractField -------------------------------------------------------------------------


def _field_path(spec: str) -> list[str]:
    """A V2 field path: dot-separated names; a name in backticks may contain dots (and
    ``\\``` for a backtick)."""
    path: list[str] = []
    i, n = 0, len(spec)
    while True:
        if spec.startswith("`", i):
            j = i + 1
            while j < n and not (
                spec[j] == "`" and spec[j - 1] != "\\" and spec[j + 1 : j + 2] in ("", ".")
            ):
                j += 1
            if j < n:
                path.append(spec[i + 1 : j].replace("\\`", "`"))
                i = j + 1
                if i >= n:
                    return path
                i += 1  # the dot
                continue
        end = spec.find(".", i)
        if end < 0:
            path.append(spec[i:])
            return path
        path.append(spec[i:end])
        i = end + 1


class ExtractField(_KeyOrValue):
    """Replace the key or value with one of its fields (a null passes through unchanged).

    With ``field.syntax.version=V2`` the field is a dotted path into nested structs or maps
    (backticks around a name that contains dots).
    """

    purpose = "field extraction"
    config_def = ConfigDef(
        [
            _string("field", "Field name to extract.", NO_DEFAULT, non_empty),
            _string(
                "field.syntax.version", "V1: root fields only; V2: dotted paths to nested fields.",
                "V1", one_of("V1", "V2"), Importance.HIGH,
            ),
            _REPLACE_NULL,
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        field: str = parsed["field"]
        v2 = parsed["field.syntax.version"].upper() == "V2"
        self.path = _field_path(field) if v2 else [field]
        self.replace_null: bool = parsed["replace.null.with.default"]

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = self._value(record)
        if value is None:
            return record
        if self._schema(record) is None:
            current: Any = _require_map(value, self.purpose)
            for name in self.path:
                current = current.get(name) if isinstance(current, Mapping) else None
            return self._with(record, None, current)
        current = _require_struct(value, self.purpose)
        schema = current.schema
        for depth, name in enumerate(self.path):
            if schema.type is not Type.STRUCT:
                raise DataException(f"Unknown field: {'.'.join(self.path[: depth + 1])}")
            field = schema.field(name)
            if field is None:
                raise DataException(f"Unknown field: {'.'.join(self.path[: depth + 1])}")
            schema = field.schema
            current = None if current is None else _field_value(current, name, self.replace_null)
        return self._with(record, schema, current)


class ExtractFieldKey(ExtractField):
    """``ExtractField$Key``."""

    side = "key"


class ExtractFieldValue(ExtractField):
    """``ExtractField$Value``."""

    side = "value"


# --- HoistField ---------------------------------------------------------------------------


class HoistField(_KeyOrValue):
    """Wrap the key or value in a struct (or map) with the single field ``field``.

    As in Kafka a null is wrapped too (``{field: null}``); with a schema that needs the
    schema to be optional.
    """

    config_def = ConfigDef(
        [
            _string("field", "Name of the single field of the result.", NO_DEFAULT, non_empty),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.field: str = parsed["field"]
        self._cache = _SchemaCache()

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self._schema(record), self._value(record)
        if schema is None:
            return self._with(record, None, {self.field: value})
        wrapped = self._cache.get(schema, lambda s: struct_schema([(self.field, s)]))
        return self._with(record, wrapped, Struct(wrapped, {self.field: value}))


class HoistFieldKey(HoistField):
    """``HoistField$Key``."""

    side = "key"


class HoistFieldValue(HoistField):
    """``HoistField$Value``."""

    side = "value"


# --- Flatten ------------------------------------------------------------------------------


class Flatten(_StructOrMap):
    """Flatten nested structs (or maps) into top-level fields named ``outer<delimiter>inner``.

    Arrays and maps inside a struct are kept as they are; a field under an optional struct
    becomes optional (a null struct nulls its fields).
    """

    purpose = "flattening"
    config_def = ConfigDef(
        [
            _string("delimiter", "Delimiter between the field names of nested fields.", "."),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        super()._configure(parsed)
        self.delimiter: str = parsed["delimiter"]

    def _name(self, prefix: str, name: str) -> str:
        return f"{prefix}{self.delimiter}{name}" if prefix else name

    def _schemaless(self, record: ConnectRecord, value: Mapping[str, Any]) -> Any:
        out: dict[str, Any] = {}
        self._flatten_map(value, "", out)
        return out

    def _flatten_map(self, value: Mapping[Any, Any], prefix: str, out: dict[str, Any]) -> None:
        for key, item in value.items():
            name = self._name(prefix, str(key))
            if isinstance(item, Mapping):
                self._flatten_map(item, name, out)
            elif isinstance(item, Struct):
                raise DataException(
                    f"Flatten does not support a Struct without a schema (field {name!r})"
                )
            else:
                out[name] = item

    def _derive(self, schema: Schema) -> Schema:
        fields: list[tuple[str, Schema]] = []

        def walk(struct: Schema, prefix: str, optional: bool) -> None:
            for field in struct.fields:
                name = self._name(prefix, field.name)
                nested_optional = optional or field.schema.optional
                if field.schema.type is Type.STRUCT:
                    walk(field.schema, name, nested_optional)
                else:
                    fields.append(
                        (name, field.schema.as_optional() if nested_optional else field.schema)
                    )

        walk(schema, "", schema.optional)
        return _derived_struct(schema, fields)

    def _with_schema(self, record: ConnectRecord, value: Struct, schema: Schema) -> Any:
        out: dict[str, Any] = {}

        def walk(struct: Struct | None, shape: Schema, prefix: str) -> None:
            for field in shape.fields:
                name = self._name(prefix, field.name)
                item = None if struct is None else struct.get(field.name)
                if field.schema.type is Type.STRUCT:
                    walk(item, field.schema, name)
                else:
                    out[name] = item

        walk(value, value.schema, "")
        return Struct(schema, out)


class FlattenKey(Flatten):
    """``Flatten$Key``."""

    side = "key"


class FlattenValue(Flatten):
    """``Flatten$Value``."""

    side = "value"


# --- SetSchemaMetadata --------------------------------------------------------------------


class SetSchemaMetadata(_KeyOrValue):
    """Set the name and/or version of the key or value schema (a schema is required)."""

    config_def = ConfigDef(
        [
            _string("schema.name", "Schema name to set."),
            ConfigKey("schema.version", ConfigType.INT, None, doc="Schema version to set."),
            _REPLACE_NULL,
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.name: str | None = parsed["schema.name"] or None
        self.version: int | None = parsed["schema.version"]
        self.replace_null: bool = parsed["replace.null.with.default"]
        if self.name is None and self.version is None:
            raise ConfigException("schema.name", "neither schema.name nor schema.version is set")
        self._cache = _SchemaCache()

    def _renamed(self, schema: Schema) -> Schema:
        default = schema.default
        updated = dataclasses.replace(
            schema,
            name=self.name if self.name is not None else schema.name,
            version=self.version if self.version is not None else schema.version,
            default=None,
        )
        if isinstance(default, Struct):
            default = self._restructure(default, updated)
        return dataclasses.replace(updated, default=default) if default is not None else updated

    def _restructure(self, value: Struct, schema: Schema) -> Struct:
        names = (f.name for f in value.schema.fields)
        return Struct(schema, {n: _field_value(value, n, self.replace_null) for n in names})

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema = self._schema(record)
        if schema is None:
            raise DataException(
                f"SetSchemaMetadata needs a {self.side} schema; the record has none"
            )
        updated = self._cache.get(schema, self._renamed)
        value = self._value(record)
        if isinstance(value, Struct):
            value = self._restructure(value, updated)
        return self._with(record, updated, value)


class SetSchemaMetadataKey(SetSchemaMetadata):
    """``SetSchemaMetadata$Key``."""

    side = "key"


class SetSchemaMetadataValue(SetSchemaMetadata):
    """``SetSchemaMetadata$Value``."""

    side = "value"


# --- routers ------------------------------------------------------------------------------

_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_DateField = Callable[[datetime.datetime, int], str]


def _month(t: datetime.datetime, n: int) -> str:
    name = _MONTHS[t.month - 1]
    return name if n >= 4 else name[:3] if n == 3 else str(t.month).zfill(n)


_DATE_FIELDS: dict[str, _DateField] = {
    "y": lambda t, n: f"{t.year % 100:02d}" if n == 2 else str(t.year).zfill(n),
    "M": _month,
    "d": lambda t, n: str(t.day).zfill(n),
    "D": lambda t, n: str(t.timetuple().tm_yday).zfill(n),
    "E": lambda t, n: _DAYS[t.weekday()] if n >= 4 else _DAYS[t.weekday()][:3],
    "u": lambda t, n: str(t.isoweekday()).zfill(n),
    "a": lambda t, n: "AM" if t.hour < 12 else "PM",
    "H": lambda t, n: str(t.hour).zfill(n),
    "k": lambda t, n: str(t.hour or 24).zfill(n),
    "K": lambda t, n: str(t.hour % 12).zfill(n),
    "h": lambda t, n: str(t.hour % 12 or 12).zfill(n),
    "m": lambda t, n: str(t.minute).zfill(n),
    "s": lambda t, n: str(t.second).zfill(n),
    "S": lambda t, n: str(t.microsecond // 1000).zfill(n),
    "Z": lambda t, n: "+0000",
}  # fmt: skip


def compile_date_format(name: str, pattern: str) -> Callable[[datetime.datetime], str]:
    """A formatter for a Java ``SimpleDateFormat`` pattern (English names, UTC).

    Supports the letters y M d D E u a H k K h m s S Z and quoted text (``'T'``, ``''``);
    any other pattern letter is a :class:`ConfigException` on ``name``.
    """
    parts: list[str | tuple[_DateField, int]] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "'":
            text: list[str] = []
            i += 1
            while True:
                if i >= n:
                    raise ConfigException(name, f"unterminated quote in {pattern!r}")
                if pattern[i] == "'":
                    if pattern.startswith("''", i) and text:
                        text.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                text.append(pattern[i])
                i += 1
            parts.append("".join(text) or "'")
        elif "a" <= char.lower() <= "z":
            end = i
            while end < n and pattern[end] == char:
                end += 1
            field = _DATE_FIELDS.get(char)
            if field is None:
                raise ConfigException(
                    name, f"unsupported date pattern letter {char!r} in {pattern!r}"
                )
            parts.append((field, end - i))
            i = end
        else:
            parts.append(char)
            i += 1

    def format_time(t: datetime.datetime) -> str:
        return "".join(p if isinstance(p, str) else p[0](t, p[1]) for p in parts)

    return format_time


def _date_format_validator(name: str, value: Any) -> None:
    compile_date_format(name, str(value))


class TimestampRouter(Transformation):
    """Route to a topic named from the original topic and the record timestamp (UTC)."""

    config_def = ConfigDef(
        [
            _string(
                "topic.format", "Format string with the placeholders ${topic} and ${timestamp}.",
                "${topic}-${timestamp}", None, Importance.HIGH,
            ),
            _string(
                "timestamp.format", "Format of the timestamp, as java.text.SimpleDateFormat.",
                "yyyyMMdd", _date_format_validator, Importance.HIGH,
            ),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.topic_format: str = parsed["topic.format"]
        self.formatter = compile_date_format("timestamp.format", parsed["timestamp.format"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.timestamp is None:
            raise DataException(f"Timestamp missing on record for topic {record.topic!r}")
        stamp = self.formatter(_millis_to_datetime(record.timestamp))
        topic = self.topic_format.replace("${topic}", record.topic).replace("${timestamp}", stamp)
        return record.new_record(topic=topic)


@dataclasses.dataclass(frozen=True)
class _Group:
    ref: int | str


def compile_java_replacement(name: str, text: str, pattern: re.Pattern[str]) -> list[str | _Group]:
    """A Java ``Matcher`` replacement string as literal parts and group references.

    ``$n`` is group n (further digits join while they still name a group, as in Java),
    ``${name}`` a named group and ``\\x`` the character x; anything else after ``$`` or a
    group the pattern lacks is a :class:`ConfigException` on ``name``.
    """
    parts: list[str | _Group] = []
    literal: list[str] = []
    i, n = 0, len(text)

    def fail(message: str) -> ConfigException:
        return ConfigException(name, f"{message} in {text!r}")

    while i < n:
        char = text[i]
        if char == "\\":
            if i + 1 >= n:
                raise fail("character to be escaped is missing")
            literal.append(text[i + 1])
            i += 2
            continue
        if char != "$":
            literal.append(char)
            i += 1
            continue
        i += 1
        if i >= n:
            raise fail("illegal group reference: group index is missing")
        ref: int | str
        if text[i] == "{":
            close = text.find("}", i)
            ref = text[i + 1 : close] if close > 0 else ""
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", ref):
                raise fail("illegal named group reference")
            if ref not in pattern.groupindex:
                raise fail(f"no group with name {{{ref}}}")
            i = close + 1
        elif text[i].isdigit():
            ref = int(text[i])
            if ref > pattern.groups:
                raise fail(f"no group {ref}")
            i += 1
            while i < n and text[i].isdigit() and ref * 10 + int(text[i]) <= pattern.groups:
                ref = ref * 10 + int(text[i])
                i += 1
        else:
            raise fail("illegal group reference")
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(_Group(ref))
    if literal:
        parts.append("".join(literal))
    return parts


class RegexRouter(Transformation):
    """Rename the topic when the whole topic name matches ``regex`` (Java ``matches()``),
    to ``replacement`` with its ``$n`` group references filled in."""

    config_def = ConfigDef(
        [
            _string("regex", "Regular expression to match topics.", NO_DEFAULT, regex_validator),
            _string("replacement", "Replacement string.", NO_DEFAULT),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.regex = java_regex("regex", parsed["regex"])
        self.replacement = compile_java_replacement(
            "replacement", parsed["replacement"], self.regex
        )

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        match = self.regex.fullmatch(record.topic)
        if match is None:
            return record
        topic = "".join(
            part if isinstance(part, str) else match.group(part.ref) or ""
            for part in self.replacement
        )
        return record.new_record(topic=topic)


# --- Filter and headers -------------------------------------------------------------------


class Filter(Transformation):
    """Drop every record (give it a predicate to drop only some)."""

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return None


class DropHeaders(Transformation):
    """Remove every header with one of the names in ``headers``."""

    config_def = ConfigDef(
        [
            _list("headers", "The name of the headers to be removed."),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.headers = frozenset(parsed["headers"])

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        kept = tuple(h for h in record.headers if h[0] not in self.headers)
        return record.new_record(headers=kept)


class InsertHeader(Transformation):
    """Add the header ``header`` with the literal ``value.literal`` (UTF-8)."""

    config_def = ConfigDef(
        [
            _string("header", "The name of the header.", NO_DEFAULT, non_empty),
            _string("value.literal", "The literal value to use as the header value.", NO_DEFAULT),
        ]
    )  # fmt: skip

    def _configure(self, parsed: dict[str, Any]) -> None:
        self.header: str = parsed["header"]
        self.value: bytes = parsed["value.literal"].encode()

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return record.new_record(headers=(*record.headers, (self.header, self.value)))


#: Every transform by its Kafka class name and by its short name (``InsertField$Value``).
TRANSFORMS: dict[str, type[Transformation]] = {}
for _name, _cls in {
    "InsertField$Key": InsertFieldKey, "InsertField$Value": InsertFieldValue,
    "ReplaceField$Key": ReplaceFieldKey, "ReplaceField$Value": ReplaceFieldValue,
    "MaskField$Key": MaskFieldKey, "MaskField$Value": MaskFieldValue,
    "ExtractField$Key": ExtractFieldKey, "ExtractField$Value": ExtractFieldValue,
    "HoistField$Key": HoistFieldKey, "HoistField$Value": HoistFieldValue,
    "Flatten$Key": FlattenKey, "Flatten$Value": FlattenValue,
    "SetSchemaMetadata$Key": SetSchemaMetadataKey,
    "SetSchemaMetadata$Value": SetSchemaMetadataValue,
    "ValueToKey": ValueToKey, "TimestampRouter": TimestampRouter, "RegexRouter": RegexRouter,
    "Filter": Filter, "DropHeaders": DropHeaders, "InsertHeader": InsertHeader,
}.items():  # fmt: skip
    TRANSFORMS[_name] = TRANSFORMS[TRANSFORM_PACKAGE + _name] = _cls


# --- the chain ----------------------------------------------------------------------------


@dataclasses.dataclass
class TransformStage:
    """One configured transform, applied where its predicate (if any) says so."""

    alias: str
    transform: Transformation
    predicate: Predicate | None = None
    negate: bool = False

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if self.predicate is not None and self.predicate.test(record) == self.negate:
            return record
        return self.transform.apply(record)


class TransformChain:
    """A connector's transforms in order; :meth:`apply` returns None for a dropped record."""

    def __init__(
        self, stages: Iterable[TransformStage], predicates: Iterable[Predicate] = ()
    ) -> None:
        self.stages = list(stages)
        self.predicates = list(predicates)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        for stage in self.stages:
            result = stage.apply(record)
            if result is None:
                return None
            record = result
        return record

    def close(self) -> None:
        """Close every transform and predicate."""
        for stage in self.stages:
            stage.transform.close()
        for predicate in self.predicates:
            predicate.close()

    def __len__(self) -> int:
        return len(self.stages)


class _ChainBuilder:
    """Reads ``transforms``/``predicates`` configs, collecting every error by full key."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.errors: dict[str, list[str]] = {}
        self.predicates: dict[str, Predicate] = {}
        self.stages: list[TransformStage] = []

    def error(self, key: str, message: str) -> None:
        self.errors.setdefault(key, []).append(message)

    def aliases(self, key: str) -> list[str]:
        try:
            names: list[str] = parse_value(key, ConfigType.LIST, self.config.get(key)) or []
        except ConfigException as exc:  # pragma: no cover - a LIST always parses
            self.error(key, exc.message)
            return []
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            self.error(key, f"duplicate alias: {', '.join(duplicates)}")
        return list(dict.fromkeys(names))

    def plugin(
        self, prefix: str, kind: str, registry: Mapping[str, type[Any]], reserved: set[str]
    ) -> Any:
        """The configured instance under ``prefix`` (None, with errors recorded, if bad)."""
        type_key = prefix + "type"
        class_name = str(self.config.get(type_key) or "").strip()
        if not class_name:
            self.error(type_key, f"missing required configuration: the {kind} class")
            return None
        cls = registry.get(class_name)
        if cls is None:
            self.error(type_key, f"unknown {kind} type {class_name!r}")
            return None
        sub = {
            key[len(prefix) :]: value
            for key, value in self.config.items()
            if key.startswith(prefix) and key[len(prefix) :] not in reserved
        }
        raw = cls.translate(sub) if issubclass(cls, Transformation) else sub
        problems = {k: m for k, m in cls.config_def.errors(raw).items() if m}
        for key, messages in problems.items():
            for message in messages:
                self.error(prefix + key, message)
        if problems:
            return None
        instance = cls()
        try:
            instance.configure(sub)
        except ConfigException as exc:
            self.error(prefix + exc.name, exc.message)
            return None
        return instance

    def build(self) -> TransformChain:
        transform_aliases = self.aliases("transforms")
        predicate_aliases = self.aliases("predicates")
        for alias in predicate_aliases:
            prefix = f"predicates.{alias}."
            predicate = self.plugin(prefix, "predicate", PREDICATES, {"type"})
            if predicate is not None:
                self.predicates[alias] = predicate
        for alias in transform_aliases:
            self._stage(alias, predicate_aliases)
        return TransformChain(self.stages, self.predicates.values())

    def _stage(self, alias: str, predicate_aliases: list[str]) -> None:
        prefix = f"transforms.{alias}."
        before = sum(map(len, self.errors.values()))
        transform = self.plugin(prefix, "transform", TRANSFORMS, {"type", "predicate", "negate"})
        predicate_key, negate_key = prefix + "predicate", prefix + "negate"
        predicate_alias = str(self.config.get(predicate_key) or "").strip() or None
        negate = False
        if self.config.get(negate_key) is not None:
            try:
                negate = parse_value(negate_key, ConfigType.BOOLEAN, self.config[negate_key])
            except ConfigException as exc:
                self.error(negate_key, exc.message)
            if predicate_alias is None:
                self.error(negate_key, f"{negate_key} is set but {predicate_key} is not")
        predicate = None
        if predicate_alias is not None:
            if predicate_alias not in predicate_aliases:
                self.error(
                    predicate_key,
                    f"predicate {predicate_alias!r} is not listed in 'predicates'",
                )
            predicate = self.predicates.get(predicate_alias)
        if transform is not None and sum(map(len, self.errors.values())) == before:
            if predicate_alias is not None and predicate is None:
                return  # the predicate's own config is bad (reported under predicates.)
            self.stages.append(TransformStage(alias, transform, predicate, negate))


def build_chain(config: Mapping[str, str]) -> TransformChain:
    """The transform chain of a connector config; a :class:`ConfigException` naming the
    full key (``transforms.mask.fields``) of the first problem."""
    builder = _ChainBuilder(config)
    chain = builder.build()
    if builder.errors:
        chain.close()
        key, messages = next(iter(builder.errors.items()))
        raise ConfigException(key, messages[0])
    return chain


def chain_errors(config: Mapping[str, str]) -> dict[str, list[str]]:
    """Every bad transform or predicate key with its messages (empty if the config is fine)."""
    builder = _ChainBuilder(config)
    builder.build().close()
    return builder.errors
