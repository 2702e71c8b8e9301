"""Postgres sink: writes the records of topics into Postgres tables (psycopg 3).

Configured as Confluent's JDBC sink (``connection.url``, ``insert.mode``, ``pk.mode``,
``pk.fields``, ``delete.enabled``, ``auto.create``, ``auto.evolve``, ``table.name.format``,
``batch.size``), so its configs carry over; it speaks Postgres only, and reads Debezium
change events natively.

* Tables. A topic's records go to the table ``table.name.format`` names, ``${topic}``
  replaced by the topic. A name with dots (a Debezium topic such as
  ``server.public.customers``) keeps its last part (``customers``), a table of the
  connection's default schema (its ``search_path``). Names are quoted: case matters.
* Rows. A record's value is a struct with a schema (its fields are the columns), a map
  without one (its keys are the columns), or a Debezium change event: a struct whose
  schema name ends with ``.Envelope``, or a map, with ``before``, ``after`` and ``op``.
  Ops ``c`` (create), ``r`` (snapshot read) and ``u`` (update) write ``after``; ``d``
  deletes the row of the record's key (the tombstone that follows deletes nothing more);
  ``t`` (truncate), ``m`` (message) and unknown ops are skipped. Debezium's time types
  (days, micro- and nanoseconds since the epoch or midnight, zoned ISO-8601 strings) and
  variable-scale decimals become dates, times, timestamps and numerics; nested structs,
  maps and arrays are written as JSON text.
* Keys (``pk.mode``). ``record_key``: the record key's fields (a struct or a map;
  ``pk.fields`` of them, default all), or a primitive key as the column ``pk.fields``
  names (default ``id``); key values win over value fields of the same name.
  ``record_value``: ``pk.fields`` of the value (default all its fields). ``kafka``: the
  topic, partition and offset (columns ``__connect_topic``, ``__connect_partition``,
  ``__connect_offset`` unless ``pk.fields`` names three). ``none``: no key (inserts only).
* Writes (``insert.mode``). ``upsert``: ``INSERT ... ON CONFLICT (key) DO UPDATE`` of the
  record's columns (columns the record lacks keep their values); ``insert``: plain
  inserts (a duplicate key fails the task); ``update``: updates existing rows only. A
  tombstone (null value) deletes its key's row when ``delete.enabled`` (which needs
  ``pk.mode=record_key``); otherwise tombstones are skipped. Rows are copied (``COPY``)
  into a temporary table, then applied by one statement per ``batch.size`` rows, about
  twice the rate of ``executemany`` of one-row upserts. Several changes of one key in a
  batch collapse into their outcome (a delete if there was one, then the row merged from
  the changes after it), as Postgres updates a row once per statement.
* Durability. ``put`` buffers; once ``batch.size`` records are buffered, and at each
  ``flush``/``pre_commit``, the buffer is written and committed in one transaction,
  so the worker commits the group's offsets only for committed rows (at least once). A
  failed write rolls back its whole transaction: none of its rows are visible. Lost or
  refused connections raise :class:`RetriableException` (the worker puts the batch again;
  the task reconnects); bad data (a missing key field, a value Postgres refuses) raises
  :class:`ConnectException` naming the record or table. If ``pre_commit`` cannot reach
  Postgres it commits nothing this time and writes the buffer at the next attempt.
* Exactly once (``exactly.once=true``). Each transaction also stores every written
  partition's next offset in ``offsets.table`` (``connector``, ``topic``, ``partition``,
  ``next_offset``), so rows and offsets commit together. ``open`` reads the stored
  offsets and rewinds the consumer to them, and records below a partition's stored offset
  are skipped, so no record is applied twice whatever the group's offsets say. A
  transaction first locks its partitions' offset rows, and fails the task if another task
  (a zombie still writing the partition) moved them.
* DDL. ``auto.create`` creates a missing table from the key and value schemas, with a
  primary key on the key columns and optional fields nullable; ``auto.evolve`` adds
  columns for new optional fields. Both need schemas (not schemaless maps) and run in
  their own transaction before the rows. Types: int8 and int16 ``smallint``, int32
  ``integer``, int64 ``bigint``, float32 ``real``, float64 ``double precision``,
  ``boolean``, string ``text``, bytes ``bytea``, structs, maps and arrays ``jsonb``;
  Decimal ``numeric``, Date ``date``, Time ``time``, Timestamp ``timestamp``, and
  Debezium's names (``io.debezium.time.*``, ``io.debezium.data.Json``/``Uuid``/``Xml``).
* Connections. ``connection.url`` is ``jdbc:postgresql://host[:port]/database[?user=..
  &password=..]`` or ``postgresql://[user[:password]@]host[:port]/database``;
  ``connection.user``/``connection.password`` win over the URL's. A worker that sets
  ``postgres.allowed.hosts`` refuses other hosts (``validate`` checks without connecting;
  the connector checks again when it starts). Sessions run in UTC, so Connect's UTC
  timestamps and Debezium's times keep their values in ``timestamp`` columns.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import json
import logging
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import psycopg

from data_plane.connect.api import (
    ConnectException,
    RetriableException,
    SinkConnector,
    SinkTask,
    TopicPartition,
)
from data_plane.connect.config import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConfigType,
    Importance,
    at_least,
    non_empty,
    one_of,
)
from data_plane.connect.connectors.postgres_common import ALLOWED_HOSTS, host_error, quote_ident
from data_plane.connect.data import (
    DATE,
    DECIMAL,
    DECIMAL_SCALE,
    TIME,
    TIMESTAMP,
    ConnectRecord,
    DataException,
    Schema,
    Struct,
    Type,
    struct_schema,
)

# What a CREATE TABLE IF NOT EXISTS raises when another task creates the table at the same
# moment: the table's name, its row type or its index's entry meets the other's.
_CREATED_MEANWHILE = (
    psycopg.errors.UniqueViolation,
    psycopg.errors.DuplicateTable,
    psycopg.errors.DuplicateObject,
)

logger = logging.getLogger(__name__)

INSERT_MODES = ("insert", "upsert", "update")
PK_MODES = ("none", "record_key", "record_value", "kafka")
KAFKA_PK_FIELDS = ["__connect_topic", "__connect_partition", "__connect_offset"]

CONFIG_DEF = ConfigDef(
    [
        ConfigKey("connection.url", ConfigType.STRING, importance=Importance.HIGH, validator=non_empty, doc="the database: jdbc:postgresql://host[:port]/database[?user=..&password=..] or postgresql://[user[:password]@]host[:port]/database"),  # noqa: E501
        ConfigKey("connection.user", ConfigType.STRING, None, importance=Importance.HIGH, doc="the user (wins over the URL's)"),  # noqa: E501
        ConfigKey("connection.password", ConfigType.PASSWORD, None, importance=Importance.HIGH, doc="the password (wins over the URL's; never logged)"),  # noqa: E501
        ConfigKey("table.name.format", ConfigType.STRING, "${topic}", validator=non_empty, doc="the table of a topic's records, ${topic} replaced by the topic; of a name with dots the last part is the table (server.public.customers: customers)"),  # noqa: E501
        ConfigKey("insert.mode", ConfigType.STRING, "upsert", importance=Importance.HIGH, validator=one_of(*INSERT_MODES), doc="insert (plain inserts), upsert (insert or update by the primary key) or update (existing rows only)"),  # noqa: E501
        ConfigKey("pk.mode", ConfigType.STRING, "record_key", importance=Importance.HIGH, validator=one_of(*PK_MODES), doc="where the primary key comes from: record_key, record_value, kafka (topic, partition, offset) or none"),  # noqa: E501
        ConfigKey("pk.fields", ConfigType.LIST, [], doc="the key columns: record_key: fields of a struct key (default all), or the column of a primitive key (default id); record_value: fields of the value (default all); kafka: three column names"),  # noqa: E501
        ConfigKey("delete.enabled", ConfigType.BOOLEAN, True, doc="a tombstone (null value) or a Debezium delete deletes the row of its key (needs pk.mode=record_key); false: they are skipped"),  # noqa: E501
        ConfigKey("auto.create", ConfigType.BOOLEAN, False, doc="create a missing table from the record's schemas (CREATE TABLE IF NOT EXISTS, primary key on the key columns)"),  # noqa: E501
        ConfigKey("auto.evolve", ConfigType.BOOLEAN, False, doc="add a column for a new optional field of the record's schema (ALTER TABLE ADD COLUMN)"),  # noqa: E501
        ConfigKey("batch.size", ConfigType.INT, 3000, validator=at_least(1), doc="rows per statement; put writes and commits once this many records are buffered"),  # noqa: E501
        ConfigKey("exactly.once", ConfigType.BOOLEAN, False, doc="store each partition's next offset in offsets.table in the same transaction as the rows, and rewind to it when a partition is assigned"),  # noqa: E501
        ConfigKey("offsets.table", ConfigType.STRING, "connect_offsets", validator=non_empty, doc="the table of exactly.once's offsets ([schema.]table; created if missing)"),  # noqa: E501
    ]
)  # fmt: skip


# --- connection URLs --------------------------------------------------------------------------

_URL_FORMS = (
    "expected jdbc:postgresql://host[:port]/database[?user=..&password=..] "
    "or postgresql://[user[:password]@]host[:port]/database"
)
# URL parameters passed on to libpq as they are, and JDBC names for some of them.
_LIBPQ_PARAMS = frozenset({
    "sslmode", "connect_timeout", "application_name", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "tcp_user_timeout", "target_session_attrs",
    "gssencmode", "channel_binding", "options",
})  # fmt: skip
_JDBC_PARAMS = {"connectTimeout": "connect_timeout", "ApplicationName": "application_name"}
# Files on the worker's machine: not for connectors on a worker that limits their hosts.
_FILE_PARAMS = frozenset({"sslrootcert", "sslcert", "sslkey", "sslcrl", "sslpassword"})
# What would take the connection somewhere else than the URL's host and database.
_REDIRECTING_PARAMS = frozenset(
    {"host", "hostaddr", "port", "dbname", "service", "servicefile", "passfile"}
)


@dataclasses.dataclass(frozen=True)
class PostgresUrl:
    host: str
    port: int
    dbname: str
    user: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    params: tuple[tuple[str, str], ...] = ()


def parse_url(url: str, hosted: bool = False) -> PostgresUrl:
    """The parts of a ``connection.url``; ``ValueError`` (never quoting the URL, which may
    hold a password) if it is not one. ``hosted``: refuse parameters naming local files."""
    text = url.strip()
    if text.startswith("jdbc:"):
        text = text[len("jdbc:") :]
    scheme, _, rest = text.partition(":")
    if scheme.lower() not in ("postgresql", "postgres") or not rest.startswith("//"):
        raise ValueError(_URL_FORMS)
    parts = urllib.parse.urlsplit("postgresql:" + rest)
    if "," in parts.netloc:
        raise ValueError("one host only (not a list of hosts)")
    try:
        port = parts.port or 5432
    except ValueError:
        raise ValueError("the port is not a number from 1 to 65535") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"no host: {_URL_FORMS}")
    dbname = urllib.parse.unquote(parts.path.removeprefix("/"))
    if not dbname or "/" in dbname:
        raise ValueError(f"no database: {_URL_FORMS}")
    user = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    params: dict[str, str] = {}
    for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if name == "user":
            user = value
        elif name == "password":
            password = value
        elif name in _REDIRECTING_PARAMS:
            raise ValueError(f"parameter {name!r}: give the host, port and database in the URL")
        elif name in _FILE_PARAMS:
            if hosted:
                raise ValueError(f"parameter {name!r} (a file on the worker) is not allowed here")
            params[name] = value
        elif name in _LIBPQ_PARAMS or name in _JDBC_PARAMS:
            params[_JDBC_PARAMS.get(name, name)] = value
        elif name == "ssl" and value.lower() == "true":
            params.setdefault("sslmode", "require")
        elif name == "currentSchema":
            params["options"] = "-c search_path=" + value.replace("\\", "\\\\").replace(" ", "\\ ")
        # Other JDBC driver settings (prepareThreshold, reWriteBatchedInserts, ...) have no
        # meaning here and are ignored, so JDBC URLs carry over.
    return PostgresUrl(host, port, dbname, user, password, tuple(sorted(params.items())))


# --- configuration checks ---------------------------------------------------------------------


def config_errors(
    config: Mapping[str, Any], worker_config: Mapping[str, str]
) -> dict[str, list[str]]:
    """The errors of keys taken together (each key alone is checked by ``CONFIG_DEF``)."""
    errors: dict[str, list[str]] = {}

    def value(name: str) -> Any:
        try:
            return CONFIG_DEF.parse_key(CONFIG_DEF.keys[name], config)
        except ConfigException:
            return None  # reported by CONFIG_DEF.errors

    url = value("connection.url")
    if url:
        try:
            parsed = parse_url(url, hosted=bool(worker_config.get(ALLOWED_HOSTS)))
        except ValueError as exc:
            errors["connection.url"] = [str(exc)]
        else:
            refused = host_error(parsed.host, parsed.port, worker_config)
            if refused:
                errors["connection.url"] = [refused]
    insert_mode = (value("insert.mode") or "").lower()
    pk_mode = (value("pk.mode") or "").lower()
    pk_fields = value("pk.fields") or []
    if pk_mode == "none" and insert_mode in ("upsert", "update"):
        errors["pk.mode"] = [
            f"insert.mode={insert_mode} needs a primary key: set pk.mode to record_key, "
            "record_value or kafka (or insert.mode=insert)"
        ]
    if pk_mode == "none" and pk_fields:
        errors["pk.fields"] = ["pk.mode=none takes no pk.fields"]
    if pk_mode == "kafka" and pk_fields and len(pk_fields) != 3:
        errors["pk.fields"] = [
            "pk.mode=kafka needs three pk.fields (the topic, partition and offset columns)"
        ]
    if value("delete.enabled") and pk_mode and pk_mode != "record_key":
        errors["delete.enabled"] = [
            f"deletes are by the record key: delete.enabled=true needs pk.mode=record_key, "
            f"not {pk_mode} (or set delete.enabled=false)"
        ]
    return errors


class PostgresSinkConnector(SinkConnector):
    version = "1.0"
    doc = (
        "Writes topics into Postgres tables: inserts, upserts or updates by key, deletes on "
        "tombstones, Debezium change events, optional table creation and exactly-once "
        "offsets."
    )
    config_def = CONFIG_DEF

    def validate(self, config: Mapping[str, str]) -> dict[str, list[str]]:
        errors = super().validate(config)
        for key, found in config_errors(config, self.worker_config).items():
            errors.setdefault(key, []).extend(found)
        return errors

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        for key, found in sorted(config_errors(config, self.worker_config).items()):
            raise ConfigException(key, "; ".join(found))

    def task_class(self) -> type[SinkTask]:
        return PostgresSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """``tasks.max`` tasks sharing the topics' partitions through the group."""
        return [dict(self.raw) for _ in range(max_tasks)]


# --- values -------------------------------------------------------------------------------------

DEBEZIUM_DATE = "io.debezium.time.Date"
DEBEZIUM_TIME = "io.debezium.time.Time"
DEBEZIUM_MICRO_TIME = "io.debezium.time.MicroTime"
DEBEZIUM_NANO_TIME = "io.debezium.time.NanoTime"
DEBEZIUM_TIMESTAMP = "io.debezium.time.Timestamp"
DEBEZIUM_MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
DEBEZIUM_NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
DEBEZIUM_ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
DEBEZIUM_ZONED_TIME = "io.debezium.time.ZonedTime"
DEBEZIUM_JSON = "io.debezium.data.Json"
DEBEZIUM_UUID = "io.debezium.data.Uuid"
DEBEZIUM_XML = "io.debezium.data.Xml"
DEBEZIUM_VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"

_SQL_TYPES = {
    Type.INT8: "smallint", Type.INT16: "smallint", Type.INT32: "integer", Type.INT64: "bigint",
    Type.FLOAT32: "real", Type.FLOAT64: "double precision", Type.BOOLEAN: "boolean",
    Type.STRING: "text", Type.BYTES: "bytea",
    Type.ARRAY: "jsonb", Type.MAP: "jsonb", Type.STRUCT: "jsonb",
}  # fmt: skip
_LOGICAL_SQL_TYPES = {
    DECIMAL: "numeric", DATE: "date", TIME: "time", TIMESTAMP: "timestamp",
    DEBEZIUM_DATE: "date", DEBEZIUM_TIME: "time", DEBEZIUM_MICRO_TIME: "time",
    DEBEZIUM_NANO_TIME: "time", DEBEZIUM_TIMESTAMP: "timestamp",
    DEBEZIUM_MICRO_TIMESTAMP: "timestamp", DEBEZIUM_NANO_TIMESTAMP: "timestamp",
    DEBEZIUM_ZONED_TIMESTAMP: "timestamptz", DEBEZIUM_ZONED_TIME: "timetz",
    DEBEZIUM_JSON: "jsonb", DEBEZIUM_UUID: "uuid", DEBEZIUM_XML: "xml",
    DEBEZIUM_VARIABLE_DECIMAL: "numeric",
}  # fmt: skip

_EPOCH_DAY = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)  # naive: Debezium's timestamps are UTC wall clocks
_MICROS_PER_DAY = 86_400_000_000


def sql_type(schema: Schema) -> str:
    """The Postgres type of a column of ``schema`` (``auto.create``, ``auto.evolve``)."""
    if schema.name == DECIMAL:
        params = schema.params
        precision, scale = params.get("connect.decimal.precision"), params.get(DECIMAL_SCALE)
        if precision and scale and precision.isdigit() and scale.isdigit():
            if 0 < int(precision) <= 1000 and int(scale) <= int(precision):
                return f"numeric({int(precision)},{int(scale)})"
        return "numeric"
    if schema.name in _LOGICAL_SQL_TYPES:
        return _LOGICAL_SQL_TYPES[schema.name]
    return _SQL_TYPES[schema.type]


def _time_of_day(micros: int) -> datetime.time | str:
    if micros == _MICROS_PER_DAY:
        return "24:00:00"  # Postgres's end of day, which Python's time cannot hold
    if not 0 <= micros < _MICROS_PER_DAY:
        raise ValueError(f"{micros} µs is not a time of day")
    seconds, fraction = divmod(micros, 1_000_000)
    return datetime.time(seconds // 3600, seconds // 60 % 60, seconds % 60, fraction)


def _zoned(text: str) -> datetime.datetime | str:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return text  # e.g. "infinity": Postgres reads it
    return moment.astimezone(datetime.UTC) if moment.tzinfo else moment


def _variable_decimal(value: Struct) -> decimal.Decimal:
    scale, raw = value.get("scale"), value.get("value")
    return decimal.Decimal(f"{int.from_bytes(raw, 'big', signed=True)}E{-int(scale)}")


def _utc(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(datetime.UTC) if moment.tzinfo else moment


def _json_default(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.as_dict()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")  # as Kafka's JsonConverter
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(value: Any) -> str:
    """A nested struct, map or array as JSON text (for ``jsonb`` and ``json`` columns)."""
    return json.dumps(value, default=_json_default, ensure_ascii=False, separators=(",", ":"))


Converter = Callable[[Any], Any]

_CONVERTERS: dict[str, Converter] = {
    TIMESTAMP: _utc,
    DEBEZIUM_DATE: lambda days: _EPOCH_DAY + datetime.timedelta(days=days),
    DEBEZIUM_TIME: lambda millis: _time_of_day(millis * 1000),
    DEBEZIUM_MICRO_TIME: _time_of_day,
    DEBEZIUM_NANO_TIME: lambda nanos: _time_of_day(nanos // 1000),
    DEBEZIUM_TIMESTAMP: lambda millis: _EPOCH + datetime.timedelta(milliseconds=millis),
    DEBEZIUM_MICRO_TIMESTAMP: lambda micros: _EPOCH + datetime.timedelta(microseconds=micros),
    DEBEZIUM_NANO_TIMESTAMP: lambda nanos: _EPOCH + datetime.timedelta(microseconds=nanos // 1000),
    DEBEZIUM_ZONED_TIMESTAMP: _zoned,
    DEBEZIUM_VARIABLE_DECIMAL: _variable_decimal,
}  # fmt: skip


def _converter(schema: Schema) -> Converter | None:
    """What turns a (non-null) value of ``schema`` into what psycopg writes to its column."""
    if schema.name in _CONVERTERS:
        return _CONVERTERS[schema.name]
    if schema.type in (Type.STRUCT, Type.MAP, Type.ARRAY):
        return to_json
    return None


def _plain(value: Any) -> Any:
    """A schemaless value as psycopg writes it: nested maps, arrays and structs as JSON."""
    if isinstance(value, dict | list | tuple | Struct):
        return to_json(value)
    return value


# A column as auto.create and auto.evolve see it: its type, and whether it may be null.
Column = tuple[str, bool]
# The columns of a record: each one's type, or None where there is no schema to tell.
Columns = Mapping[str, Column | None]


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How the values of one struct schema become columns."""

    fields: tuple[str, ...]
    converters: tuple[tuple[str, Converter], ...]  # the fields that need converting
    columns: dict[str, Column | None]

    @staticmethod
    def of(schema: Schema) -> _Layout:
        if schema.type is not Type.STRUCT:
            raise ConnectException(f"a {schema.type.value} schema has no fields")
        converters = []
        for field in schema.fields:
            convert = _converter(field.schema)
            if convert is not None:
                converters.append((field.name, convert))
        return _Layout(
            fields=tuple(f.name for f in schema.fields),
            converters=tuple(converters),
            columns={f.name: (sql_type(f.schema), f.schema.optional) for f in schema.fields},
        )

    def row(self, value: Struct) -> dict[str, Any]:
        row = value.as_dict()
        for name, convert in self.converters:
            raw = row[name]
            if raw is not None:
                try:
                    row[name] = convert(raw)
                except (ValueError, TypeError, OverflowError, DataException) as exc:
                    raise ValueError(f"field {name!r}: {exc}") from None
        return row


class _Op(NamedTuple):
    """One record's change: ``row`` None deletes the row of ``key``."""

    tp: TopicPartition | None
    table: str
    pk: tuple[str, ...]  # the key columns (empty: pk.mode=none)
    key: tuple[Any, ...]  # their values
    row: dict[str, Any] | None
    columns: Columns | None  # the row's columns' types (None: schemaless)


@dataclasses.dataclass(slots=True)
class _Entry:
    pk: tuple[str, ...]
    key: tuple[Any, ...]
    deleted: bool = False  # delete the key's row first
    row: dict[str, Any] | None = None  # then write this


@dataclasses.dataclass
class _TableWork:
    """A table's share of a transaction, each key's changes collapsed into one entry."""

    entries: dict[Any, _Entry] = dataclasses.field(default_factory=dict)
    unkeyed: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # pk.mode=none
    columns: dict[str, Column | None] = dataclasses.field(default_factory=dict)
    pk: tuple[str, ...] = ()

    def add(self, op: _Op, ident: Any) -> None:
        if not op.pk:
            assert op.row is not None
            self.unkeyed.append(op.row)
            return
        entry = self.entries.get(ident)
        if entry is None:
            self.entries[ident] = entry = _Entry(op.pk, op.key)
        if op.row is None:
            entry.deleted, entry.row = True, None
        elif entry.row is None:
            entry.row = op.row
        else:  # later changes win, columns a later change lacks keep the earlier value
            entry.row = {**entry.row, **op.row}


class _CachedLayouts:
    """Layouts by schema: by identity first (hashing a schema costs as much as building
    its layout), then by equality, since converters build new schemas per record."""

    LIMIT = 1000

    def __init__(self, build: Callable[[Schema], _Layout] = _Layout.of) -> None:
        self._build = build
        self._by_id: dict[int, tuple[Schema, _Layout]] = {}
        self._by_schema: dict[Schema, _Layout] = {}

    def get(self, schema: Schema) -> _Layout:
        hit = self._by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        layout = self._by_schema.get(schema)
        if layout is None:
            if len(self._by_schema) >= self.LIMIT:
                self._by_schema.clear()
            layout = self._by_schema[schema] = self._build(schema)
        if len(self._by_id) >= self.LIMIT:
            self._by_id.clear()
        self._by_id[id(schema)] = (schema, layout)  # holds the schema: its id stays its own
        return layout


def _where(record: ConnectRecord) -> str:
    return f"{record.topic}-{record.partition}@{record.kafka_offset}"


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _hashable(key: tuple[Any, ...]) -> Any:
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key


# --- the task -----------------------------------------------------------------------------------


class PostgresSinkTask(SinkTask):
    config_def = CONFIG_DEF

    def __init__(self) -> None:
        super().__init__()
        self.name = ""
        self._url: PostgresUrl | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._buffer: list[_Op] = []
        self._tables: dict[str, dict[str, str]] = {}  # table → its columns' types
        self._table_names: dict[str, str] = {}  # topic → table
        self._stages: dict[tuple[str, tuple[str, ...]], str] = {}  # (table, columns) → name
        self._staged: set[str] = set()  # temporary tables that exist in this session
        self._layouts = _CachedLayouts()
        self._key_layouts = _CachedLayouts(self._primitive_key_layout)  # of primitive keys
        self._combined: dict[tuple[tuple[str, ...], int, int], tuple[Any, Any, Columns]] = {}
        # exactly.once: each partition's stored next offset (None: no row), and the next
        # offset to apply (stored, or past the records accepted since).
        self._stored: dict[TopicPartition, int | None] = {}
        self._next: dict[TopicPartition, int] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        for key, found in sorted(config_errors(config, {}).items()):
            raise ConfigException(key, "; ".join(found))
        self.name = (config.get("name") or "").strip()
        if self.config["exactly.once"] and not self.name:
            raise ConfigException("name", "exactly.once needs the connector's name")
        try:
            self._url = parse_url(self.config["connection.url"])
        except ValueError as exc:
            raise ConfigException("connection.url", str(exc)) from None
        self._insert_mode = self.config["insert.mode"].lower()
        self._pk_mode = self.config["pk.mode"].lower()
        self._pk_fields: list[str] = self.config["pk.fields"]
        self._pk_names = tuple(self._pk_fields)
        self._delete: bool = self.config["delete.enabled"]
        self._batch: int = self.config["batch.size"]
        self._exactly_once: bool = self.config["exactly.once"]
        self._offsets_table = ".".join(
            quote_ident(part) for part in self.config["offsets.table"].split(".")
        )
        self._format: str = self.config["table.name.format"]
        kafka_types = [("text", False), ("integer", False), ("bigint", False)]
        kafka_pk = self._pk_fields if self._pk_mode == "kafka" and self._pk_fields else None
        self._kafka_pk = tuple(kafka_pk or KAFKA_PK_FIELDS)
        self._kafka_columns: Columns = dict(zip(self._kafka_pk, kafka_types, strict=True))
        logger.info(
            "postgres sink %s: %s into %s:%s/%s (pk.mode=%s%s)",
            self.name,
            self._insert_mode,
            self._url.host,
            self._url.port,
            self._url.dbname,
            self._pk_mode,
            ", exactly once" if self._exactly_once else "",
        )

    def open(self, partitions: set[TopicPartition]) -> None:
        if not self._exactly_once or not partitions:
            return
        try:
            self._load_offsets(partitions)
        except RetriableException as exc:  # read at the first put instead
            logger.warning("%s: reading stored offsets failed (%s); will retry", self.name, exc)

    def close(self, partitions: set[TopicPartition]) -> None:
        """Drop what is buffered for ``partitions`` (the worker tried a last commit; what
        is still here was not committed, so the partitions' next owner reads it again)."""
        self._buffer = [op for op in self._buffer if op.tp not in partitions]
        for tp in partitions:
            self._stored.pop(tp, None)
            self._next.pop(tp, None)

    def stop(self) -> None:
        self._buffer = []
        self._drop_connection()

    # --- put, flush, pre_commit ---------------------------------------------------------------

    def put(self, records: Sequence[ConnectRecord]) -> None:
        if not records:
            return
        if self._exactly_once:
            unknown = {
                TopicPartition(r.topic, r.partition) for r in records if r.partition is not None
            } - set(self._stored)
            if unknown:
                self._load_offsets(unknown)
        ops: list[_Op] = []
        advanced: dict[TopicPartition, int] = {}
        for record in records:
            if self._exactly_once and record.partition is not None:
                if record.kafka_offset is not None:
                    tp = TopicPartition(record.topic, record.partition)
                    done = advanced.get(tp, self._next.get(tp))
                    if done is not None and record.kafka_offset < done:
                        continue  # applied already (committed, or buffered)
                    advanced[tp] = record.kafka_offset + 1
            op = self._op(record)
            if op is not None:
                ops.append(op)
        mark = len(self._buffer)
        before = {tp: self._next.get(tp) for tp in advanced}
        self._buffer.extend(ops)
        self._next.update(advanced)
        if len(self._buffer) >= self._batch:
            try:
                self._write()
            except ConnectException:
                # These records are not taken (the worker puts them again, or fails);
                # those buffered before stay for the next write.
                del self._buffer[mark:]
                for tp, offset in before.items():
                    if offset is None:
                        self._next.pop(tp, None)
                    else:
                        self._next[tp] = offset
                raise

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write and commit the buffer (with ``exactly.once``, and the offsets)."""
        if self._exactly_once:
            unknown = set(offsets) - set(self._stored)
            if unknown:
                self._load_offsets(unknown)
            for tp, offset in offsets.items():
                # Past records the worker did not hand over (dead-lettered, filtered); never
                # back, as the worker may not have applied a rewind yet.
                if offset > self._next.get(tp, -1):
                    self._next[tp] = offset
        if self._buffer or self._unstored():
            self._write()

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        try:
            self.flush(offsets)
        except RetriableException as exc:
            logger.warning("%s: commit to Postgres failed (%s); will retry", self.name, exc)
            return {}
        if self._exactly_once:
            return {tp: self._next.get(tp, offset) for tp, offset in offsets.items()}
        return dict(offsets)

    # --- records to changes -------------------------------------------------------------------

    def _table(self, topic: str) -> str:
        table = self._table_names.get(topic)
        if table is None:
            name = self._format.replace("${topic}", topic).rsplit(".", 1)[-1]
            if not name:
                raise ConnectException(f"table.name.format gives no table name for {topic!r}")
            table = self._table_names[topic] = name
        return table

    def _op(self, record: ConnectRecord) -> _Op | None:
        """The record's change, or None if it changes nothing; ConnectException if it is
        not data this sink can write."""
        tp = None if record.partition is None else TopicPartition(record.topic, record.partition)
        value, schema = record.value, record.value_schema
        delete, op = value is None, None
        if isinstance(value, Struct) and (value.schema.name or "").endswith(".Envelope"):
            after_field, op_field = value.schema.field("after"), value.schema.field("op")
            if after_field is not None and op_field is not None and value.schema.field("before"):
                op = value.get("op")
                delete = op == "d"
                value, schema = value.get("after"), after_field.schema
                if not delete and op not in ("c", "r", "u"):
                    self._skip(record, op)
                    return None
        elif isinstance(value, dict) and {"before", "after", "op"} <= value.keys():
            op = value["op"]
            delete = op == "d"
            value, schema = value["after"], None
            if not delete and op not in ("c", "r", "u"):
                self._skip(record, op)
                return None
        if delete:
            if not self._delete:
                return None
            pk, key, _ = self._key(record, None)
            return _Op(tp, self._table(record.topic), pk, key, None, None)
        if value is None:
            raise ConnectException(f"{_where(record)}: a Debezium {op!r} event without 'after'")
        columns: Columns | None
        try:
            if isinstance(value, Struct):
                layout = self._layouts.get(value.schema)
                row, columns = layout.row(value), layout.columns
            elif isinstance(value, dict):
                row = {str(k): _plain(v) for k, v in value.items()}
                columns = None
            else:
                kind = schema.type.value if schema is not None else type(value).__name__
                raise ConnectException(
                    f"{_where(record)}: the value is a {kind}; this sink writes structs "
                    "(with a schema) and maps"
                )
        except ValueError as exc:
            raise ConnectException(f"{_where(record)}: {exc}") from None
        pk, key, key_columns = self._key(record, row)
        if self._pk_mode in ("record_key", "kafka"):
            row.update(zip(pk, key, strict=True))  # the key's values win
        if pk and (columns is not None or key_columns is not None):
            columns = self._combine(pk, key_columns, columns, row)
        return _Op(tp, self._table(record.topic), pk, key, row, columns)

    def _skip(self, record: ConnectRecord, op: Any) -> None:
        if op not in ("t", "m"):
            logger.warning("%s: %s: unknown Debezium op %r skipped", self.name, _where(record), op)

    def _key(
        self, record: ConnectRecord, row: dict[str, Any] | None
    ) -> tuple[tuple[str, ...], tuple[Any, ...], Columns | None]:
        """The key columns, their values and types (None: unknown), by ``pk.mode``."""
        mode, fields = self._pk_mode, self._pk_fields
        if mode == "none":
            return (), (), None
        if mode == "kafka":
            if record.partition is None or record.kafka_offset is None:
                raise ConnectException(f"{_where(record)}: pk.mode=kafka needs a Kafka offset")
            key = (record.topic, record.partition, record.kafka_offset)
            return self._kafka_pk, key, self._kafka_columns
        if mode == "record_value":
            assert row is not None  # deletes need record_key (validated)
            names = self._pk_names or tuple(row)
            return names, self._key_values(record, names, row), None
        key = record.key
        if key is None:
            raise ConnectException(
                f"{_where(record)}: the record has no key, which pk.mode=record_key needs"
            )
        columns: Columns | None
        if isinstance(key, Struct):
            layout = self._layouts.get(key.schema)
            try:
                values = layout.row(key)
            except ValueError as exc:
                raise ConnectException(f"{_where(record)}: key {exc}") from None
            names = self._pk_names or layout.fields
            columns = layout.columns
        elif isinstance(key, dict):
            values = {str(k): _plain(v) for k, v in key.items()}
            names = self._pk_names or tuple(values)
            columns = None
        else:
            if len(fields) > 1:
                raise ConnectException(
                    f"{_where(record)}: a primitive key is one column, but pk.fields "
                    f"names {len(fields)}"
                )
            name = fields[0] if fields else "id"
            schema = record.key_schema
            columns = None
            if schema is not None:
                if schema.type is Type.STRUCT:
                    raise ConnectException(f"{_where(record)}: the key is not a Struct")
                layout = self._key_layouts.get(schema)
                columns = layout.columns
                try:
                    key = layout.converters[0][1](key) if layout.converters else key
                except (ValueError, TypeError, OverflowError) as exc:
                    raise ConnectException(f"{_where(record)}: key: {exc}") from None
            values = {name: key}
            names = (name,)
        return names, self._key_values(record, names, values), columns

    @staticmethod
    def _key_values(
        record: ConnectRecord, names: tuple[str, ...], values: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        found = tuple(map(values.get, names))
        if None in found:
            missing = [n for n, v in zip(names, found, strict=True) if v is None]
            raise ConnectException(f"{_where(record)}: key field(s) {missing} missing or null")
        return found

    def _primitive_key_layout(self, schema: Schema) -> _Layout:
        name = self._pk_fields[0] if self._pk_fields else "id"
        return _Layout.of(struct_schema([(name, schema)]))

    def _combine(
        self,
        pk: tuple[str, ...],
        key: Columns | None,
        value: Columns | None,
        row: Mapping[str, Any],
    ) -> Columns:
        """The row's columns: the key columns first and never null, typed by the key's
        schema (else the value's), then the value's. Cached when both have schemas (the
        row's columns then follow from them), as most records share their schemas."""
        ident = (pk, id(key), id(value))
        if value is not None:
            hit = self._combined.get(ident)
            if hit is not None and hit[0] is key and hit[1] is value:
                return hit[2]
        combined: dict[str, Column | None] = {}
        for name in pk:
            column = (key if key is not None else value or {}).get(name)
            combined[name] = None if column is None else (column[0], False)
        for name in row:
            if name not in combined:
                combined[name] = value.get(name) if value is not None else None
        if value is not None:
            if len(self._combined) >= _CachedLayouts.LIMIT:
                self._combined.clear()
            self._combined[ident] = (key, value, combined)  # holds both: ids stay theirs
        return combined

    # --- writing ------------------------------------------------------------------------------

    def _unstored(self) -> dict[TopicPartition, int]:
        """exactly.once: the partitions whose next offset is not stored yet."""
        return {tp: n for tp, n in self._next.items() if self._stored.get(tp) != n}

    def _collapse(self, ops: Sequence[_Op]) -> dict[str, _TableWork]:
        work: dict[str, _TableWork] = {}
        seen: set[int] = set()
        for op in ops:
            table = work.get(op.table)
            if table is None:
                table = work[op.table] = _TableWork(pk=op.pk)
            table.add(op, (op.pk, _hashable(op.key)))
            if op.row is None:
                continue
            if op.columns is None:
                for name in op.row:
                    table.columns.setdefault(name, None)
            elif id(op.columns) not in seen:
                seen.add(id(op.columns))
                for name, column in op.columns.items():
                    if table.columns.get(name) is None:
                        table.columns[name] = column
        return work

    def _write(self) -> None:
        """Write the buffer, and with exactly.once the offsets, in one transaction."""
        work = self._collapse(self._buffer)
        offsets = self._unstored() if self._exactly_once else {}
        conn = self._connection()
        try:
            self._prepare_tables(conn, work)
            with conn.transaction(), conn.cursor() as cur:
                if offsets:
                    self._fence(cur, offsets)
                for table, table_work in work.items():
                    if table in self._tables:  # else: only deletes, of a missing table
                        self._apply(cur, table, table_work)
                if offsets:
                    self._store_offsets(cur, offsets)
        except psycopg.Error as exc:
            raise self._failure(exc, "writing to Postgres") from exc
        except ConnectException:
            self._staged.clear()
            raise
        self._buffer = []
        self._stored.update(offsets)

    def _apply(self, cur: psycopg.Cursor[Any], table: str, work: _TableWork) -> None:
        deletes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[tuple[Any, ...]]] = {}
        for entry in work.entries.values():
            if entry.deleted:
                deletes.setdefault(entry.pk, []).append(entry.key)
            if entry.row is not None:
                groups.setdefault((entry.pk, tuple(entry.row)), []).append(
                    tuple(entry.row.values())
                )
        for row in work.unkeyed:
            groups.setdefault(((), tuple(row)), []).append(tuple(row.values()))
        for pk, keys in deletes.items():
            for chunk in _chunks(keys, self._batch):
                self._delete_rows(cur, table, pk, chunk)
        for (pk, columns), rows in groups.items():
            for chunk in _chunks(rows, self._batch):
                if self._insert_mode == "insert":
                    self._copy(cur, quote_ident(table), columns, chunk)
                elif self._insert_mode == "update":
                    self._update_rows(cur, table, pk, columns, chunk)
                else:
                    self._upsert_rows(cur, table, pk, columns, chunk)

    @staticmethod
    def _copy(
        cur: psycopg.Cursor[Any], target: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> None:
        names = ", ".join(map(quote_ident, columns))
        with cur.copy(f"COPY {target} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def _stage(
        self,
        cur: psycopg.Cursor[Any],
        table: str,
        columns: tuple[str, ...],
        rows: Sequence[Sequence[Any]],
    ) -> str:
        """A temporary table holding just ``rows`` (typed as ``table``'s ``columns``); one
        per table and columns, made once per session (no ON COMMIT action: Postgres would
        truncate every such table at each commit)."""
        name = self._stages.get((table, columns))
        if name is None:
            name = self._stages[(table, columns)] = quote_ident(f"stage_{len(self._stages)}")
        if name in self._staged:
            cur.execute(f"TRUNCATE {name}")
        else:
            names = ", ".join(map(quote_ident, columns))
            cur.execute(
                f"CREATE TEMPORARY TABLE IF NOT EXISTS {name} AS "  # noqa: S608 - names quoted
                f"SELECT {names} FROM {quote_ident(table)} WITH NO DATA; TRUNCATE {name}"
            )
            self._staged.add(name)
        self._copy(cur, name, columns, rows)
        return name

    @staticmethod
    def _matching(pk: Sequence[str]) -> str:
        return " AND ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in pk)

    def _upsert_rows(
        self,
        cur: psycopg.Cursor[Any],
        table: str,
        pk: tuple[str, ...],
        columns: tuple[str, ...],
        rows: Sequence[Sequence[Any]],
    ) -> None:
        stage = self._stage(cur, table, columns, rows)
        names = ", ".join(map(quote_ident, columns))
        updates = ", ".join(
            f"{quote_ident(c)} = EXCLUDED.{quote_ident(c)}" for c in columns if c not in pk
        )
        action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        cur.execute(
            f"INSERT INTO {quote_ident(table)} ({names}) SELECT {names} FROM {stage} "  # noqa: S608 - names quoted
            f"ON CONFLICT ({', '.join(map(quote_ident, pk))}) {action}"
        )

    def _update_rows(
        self,
        cur: psycopg.Cursor[Any],
        table: str,
        pk: tuple[str, ...],
        columns: tuple[str, ...],
        rows: Sequence[Sequence[Any]],
    ) -> None:
        updates = ", ".join(
            f"{quote_ident(c)} = s.{quote_ident(c)}" for c in columns if c not in pk
        )
        if not updates:
            return
        stage = self._stage(cur, table, columns, rows)
        cur.execute(
            f"UPDATE {quote_ident(table)} AS t SET {updates} FROM {stage} AS s "  # noqa: S608 - names quoted
            f"WHERE {self._matching(pk)}"
        )

    def _delete_rows(
        self, cur: psycopg.Cursor[Any], table: str, pk: tuple[str, ...], keys: Sequence[Any]
    ) -> None:
        stage = self._stage(cur, table, pk, keys)
        cur.execute(
            f"DELETE FROM {quote_ident(table)} AS t USING {stage} AS s "  # noqa: S608 - names quoted
            f"WHERE {self._matching(pk)}"
        )

    # --- tables ---------------------------------------------------------------------------------

    @staticmethod
    def _inspect(conn: psycopg.Connection[Any], table: str) -> dict[str, str] | None:
        """The table's columns and their types, None if there is no such table."""
        found = conn.execute("SELECT to_regclass(%s)::oid", [quote_ident(table)]).fetchone()
        if found is None or found[0] is None:
            return None
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [found[0]],
        ).fetchall()
        return {name: kind for name, kind in rows}

    def _prepare_tables(
        self, conn: psycopg.Connection[Any], work: Mapping[str, _TableWork]
    ) -> None:
        """Know each table's columns; create tables and add columns as configured (each
        DDL statement in its own transaction, before the rows')."""
        for table, table_work in work.items():
            existing = self._tables.get(table)
            if existing is None:
                existing = self._inspect(conn, table)
            writes = bool(table_work.unkeyed) or any(
                e.row is not None for e in table_work.entries.values()
            )
            if existing is None:
                if not writes:
                    continue  # deletes of a table that is not there: nothing to delete
                self._create_table(conn, table, table_work)
                existing = self._inspect(conn, table) or {}
            missing = [c for c in table_work.columns if c not in existing] if writes else []
            if missing:
                self._add_columns(conn, table, missing, table_work.columns)
                existing = self._inspect(conn, table) or {}
            self._tables[table] = existing

    def _create_table(self, conn: psycopg.Connection[Any], table: str, work: _TableWork) -> None:
        if not self.config["auto.create"]:
            raise ConnectException(
                f"table {table!r} does not exist: create it, or set auto.create=true"
            )
        unknown = [name for name, column in work.columns.items() if column is None]
        if unknown:
            raise ConnectException(
                f"auto.create cannot create table {table!r}: column(s) {unknown} have no "
                "schema (schemaless records); create the table, or use a converter with schemas"
            )
        definitions = [
            f"{quote_ident(name)} {column[0]}{'' if column[1] else ' NOT NULL'}"
            for name, column in work.columns.items()
            if column is not None
        ]
        if work.pk:
            definitions.append(f"PRIMARY KEY ({', '.join(map(quote_ident, work.pk))})")
        statement = f"CREATE TABLE IF NOT EXISTS {quote_ident(table)} ({', '.join(definitions)})"
        logger.info("%s: %s", self.name, statement)
        try:
            conn.execute(statement)
        except _CREATED_MEANWHILE:
            pass  # another task created it at the same moment

    def _add_columns(
        self,
        conn: psycopg.Connection[Any],
        table: str,
        missing: Sequence[str],
        columns: Mapping[str, Column | None],
    ) -> None:
        if not self.config["auto.evolve"]:
            raise ConnectException(
                f"table {table!r} has no column(s) {list(missing)}: add them, or set "
                "auto.evolve=true"
            )
        additions = []
        for name in missing:
            column = columns[name]
            if column is None:
                raise ConnectException(
                    f"auto.evolve cannot add column {name!r} to {table!r}: the records are "
                    "schemaless, so its type is unknown"
                )
            if not column[1]:
                raise ConnectException(
                    f"auto.evolve cannot add column {name!r} to {table!r}: the field is not "
                    "optional (rows already there would have no value); add it yourself"
                )
            additions.append(f"ADD COLUMN IF NOT EXISTS {quote_ident(name)} {column[0]}")
        statement = f"ALTER TABLE {quote_ident(table)} {', '.join(additions)}"
        logger.info("%s: %s", self.name, statement)
        conn.execute(statement)

    # --- exactly once ---------------------------------------------------------------------------

    def _load_offsets(self, partitions: Iterable[TopicPartition]) -> None:
        """Read the partitions' stored offsets and rewind the consumer to them."""
        wanted = set(partitions)
        conn = self._connection()
        try:
            rows = conn.execute(
                f'SELECT topic, "partition", next_offset FROM {self._offsets_table} '  # noqa: S608 - names quoted
                "WHERE connector = %s",
                [self.name],
            ).fetchall()
        except psycopg.Error as exc:
            raise self._failure(exc, "reading stored offsets") from exc
        stored = {TopicPartition(t, p): o for t, p, o in rows}
        rewinds = {}
        for tp in wanted:
            offset = stored.get(tp)
            self._stored[tp] = offset
            if offset is not None:
                self._next[tp] = offset
                rewinds[tp] = offset
        if rewinds:
            logger.info("%s: resuming from the offsets stored in Postgres: %s", self.name, rewinds)
            assert self.context is not None
            self.context.rewind(rewinds)

    def _fence(self, cur: psycopg.Cursor[Any], offsets: Mapping[TopicPartition, int]) -> None:
        """Lock the partitions' offset rows; fail if another task moved them since."""
        tps = sorted(offsets)
        rows = cur.execute(
            f'SELECT topic, "partition", next_offset FROM {self._offsets_table} '  # noqa: S608 - names quoted
            'WHERE connector = %s AND (topic, "partition") IN '
            "(SELECT * FROM unnest(%s::text[], %s::integer[])) "
            'ORDER BY topic, "partition" FOR UPDATE',
            [self.name, [tp.topic for tp in tps], [tp.partition for tp in tps]],
        ).fetchall()
        found = {TopicPartition(t, p): o for t, p, o in rows}
        for tp in tps:
            if found.get(tp) != self._stored.get(tp):
                raise ConnectException(
                    f"{tp.topic}-{tp.partition}: {self._offsets_table} holds next offset "
                    f"{found.get(tp)}, not {self._stored.get(tp)} as this task stored: another "
                    "task wrote this partition (a task that lost it, or two connectors named "
                    f"{self.name!r}); restart the task to resume from the stored offset"
                )

    def _store_offsets(
        self, cur: psycopg.Cursor[Any], offsets: Mapping[TopicPartition, int]
    ) -> None:
        tps = sorted(offsets)
        cur.execute(
            f'INSERT INTO {self._offsets_table} (connector, topic, "partition", next_offset) '  # noqa: S608 - names quoted
            "SELECT %s, * FROM unnest(%s::text[], %s::integer[], %s::bigint[]) "
            'ON CONFLICT (connector, topic, "partition") '
            "DO UPDATE SET next_offset = EXCLUDED.next_offset",
            [
                self.name,
                [tp.topic for tp in tps],
                [tp.partition for tp in tps],
                [offsets[tp] for tp in tps],
            ],
        )

    # --- the connection -------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._drop_connection()
        url = self._url
        assert url is not None, "start() first"
        params: dict[str, Any] = {"connect_timeout": "10", **dict(url.params)}
        params.setdefault("application_name", f"millrace-sink-{self.name}"[:63])
        user = self.config["connection.user"] or url.user
        password = self.config["connection.password"] or url.password
        if user:
            params["user"] = user
        if password:
            params["password"] = password
        try:
            conn = psycopg.connect(
                host=url.host, port=url.port, dbname=url.dbname, autocommit=True, **params
            )
            conn.execute("SET TIME ZONE 'UTC'")
            if self._exactly_once:
                self._create_offsets_table(conn)
        except psycopg.Error as exc:
            raise self._failure(exc, f"connecting to Postgres at {url.host}:{url.port}") from exc
        self._conn = conn
        return conn

    def _create_offsets_table(self, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._offsets_table} (connector text NOT NULL, "
                'topic text NOT NULL, "partition" integer NOT NULL, next_offset bigint NOT NULL, '
                'PRIMARY KEY (connector, topic, "partition"))'
            )
        except _CREATED_MEANWHILE:
            pass  # another task created it at the same moment

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        self._staged.clear()
        self._tables.clear()
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # pragma: no cover - closing a broken connection
                pass

    def _failure(self, exc: psycopg.Error, doing: str) -> ConnectException:
        """The exception to raise for ``exc``: retriable if the connection or the server
        failed (the task reconnects), not if Postgres refused the data or statement."""
        self._staged.clear()  # created in a transaction rolled back, perhaps
        self._tables.clear()
        message = f"{doing}: {str(exc).strip() or type(exc).__name__}"
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                self._drop_connection()
            return RetriableException(message)
        return ConnectException(message)
