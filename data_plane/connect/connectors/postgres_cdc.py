"""Postgres change data capture: a table's rows, then every change to them, as records.

The source reads a logical replication slot with the built-in ``pgoutput`` plugin and
writes one topic per table, ``<topic.prefix>.<schema>.<table>``, with records in
Debezium's shape so consumers written for Debezium's Postgres connector work:

* the key is a struct of the primary key's columns (``<prefix>.<schema>.<table>.Key``;
  no key for a table without one);
* the value is the change event envelope (``...Envelope``): ``before`` and ``after``
  (``...Value`` structs), ``source`` (``io.debezium.connector.postgresql.Source``: the
  connector, server name, database, schema, table, transaction id, LSN, commit time,
  and whether it is a snapshot read), ``op`` (``r`` snapshot read, ``c`` insert, ``u``
  update, ``d`` delete), ``ts_ms`` and ``transaction``;
* a delete is followed by a tombstone (the key with a null value) so a compacted topic
  forgets the row (``tombstones.on.delete``); an update that changes the primary key is a
  delete of the old key, its tombstone, and a create of the new one, as Debezium does.

**Snapshot, then stream.** On its first start (``snapshot.mode=initial``) the task
creates the slot exporting a snapshot, reads every captured table inside that snapshot
(``op=r``), then streams from the slot's start: nothing is missed and nothing is read
twice. A snapshot interrupted by a restart is taken again (in a fresh transaction, then
streaming from where the slot stands, so a row may be read and then changed again:
at least once, converging on the table's state).

**Offsets.** The source partition is ``{"server": <topic.prefix>}``; the offset is
``{"lsn": L, "txId": x, "event": i}``: ``L`` is the end of the last transaction all of
whose records came before this one, ``x`` the transaction this record belongs to and
``i`` its place in it. After a restart the task asks the slot for what follows ``L`` and
skips the events of ``x`` up to ``i``, so it resumes at the record after the last one
committed. The slot is told it may forget WAL up to ``L`` only once that offset is
committed, so an uncommitted change is always still in the slot.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from data_plane.connect.api import ConnectException, SourceConnector, SourceTask
from data_plane.connect.config import (
    ConfigDef,
    ConfigKey,
    ConfigType,
    Importance,
    at_least,
    non_empty,
    one_of,
)
from data_plane.connect.connectors import pgoutput, pgtypes
from data_plane.connect.connectors.postgres_common import host_error, quote_ident
from data_plane.connect.data import ConnectRecord, Schema, Struct, Type, struct_schema

logger = logging.getLogger(__name__)

VERSION = "1.0"
PLACEHOLDER = "__debezium_unavailable_value"  # an unchanged TOASTed string, as Debezium's
_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}$")
_SESSION = "-c DateStyle=ISO -c TimeZone=UTC -c IntervalStyle=postgres -c extra_float_digits=3"


def _regex_list(name: str, value: Any) -> None:
    for pattern in value or []:
        try:
            re.compile(pattern)
        except re.error as exc:
            from data_plane.connect.config import ConfigException

            raise ConfigException(name, f"{pattern!r} is not a regular expression: {exc}") from exc


def _slot_name(name: str, value: Any) -> None:
    if not _SLOT_NAME.match(str(value)):
        from data_plane.connect.config import ConfigException

        raise ConfigException(name, "must be 1 to 63 of a-z, 0-9 and _ (a replication slot name)")


CONFIG = ConfigDef(
    [
        ConfigKey("database.hostname", ConfigType.STRING, importance=Importance.HIGH, doc="the Postgres server's host", validator=non_empty),  # noqa: E501
        ConfigKey("database.port", ConfigType.INT, 5432, importance=Importance.HIGH, doc="its port", validator=at_least(1)),  # noqa: E501
        ConfigKey("database.user", ConfigType.STRING, importance=Importance.HIGH, doc="a user with the REPLICATION attribute (and SELECT on the tables)", validator=non_empty),  # noqa: E501
        ConfigKey("database.password", ConfigType.PASSWORD, "", importance=Importance.HIGH, doc="its password"),  # noqa: E501
        ConfigKey("database.dbname", ConfigType.STRING, importance=Importance.HIGH, doc="the database whose tables are captured", validator=non_empty),  # noqa: E501
        ConfigKey("database.sslmode", ConfigType.STRING, "prefer", doc="libpq's sslmode", validator=one_of("disable", "allow", "prefer", "require", "verify-ca", "verify-full")),  # noqa: E501
        ConfigKey("topic.prefix", ConfigType.STRING, importance=Importance.HIGH, doc="the logical server name: topics are <prefix>.<schema>.<table>", validator=non_empty),  # noqa: E501
        ConfigKey("plugin.name", ConfigType.STRING, "pgoutput", doc="the logical decoding plugin (pgoutput, built into Postgres 10+)", validator=one_of("pgoutput")),  # noqa: E501
        ConfigKey("slot.name", ConfigType.STRING, "debezium", doc="the replication slot (created if missing)", validator=_slot_name),  # noqa: E501
        ConfigKey("slot.drop.on.stop", ConfigType.BOOLEAN, False, doc="drop the slot when the task stops (only for tests: changes while stopped are lost)"),  # noqa: E501
        ConfigKey("publication.name", ConfigType.STRING, "dbz_publication", doc="the publication the slot streams", validator=non_empty),  # noqa: E501
        ConfigKey("publication.autocreate.mode", ConfigType.STRING, "all_tables", doc="all_tables: create it FOR ALL TABLES if missing; filtered: for the captured tables; disabled: it must exist", validator=one_of("all_tables", "filtered", "disabled")),  # noqa: E501
        ConfigKey("schema.include.list", ConfigType.LIST, [], doc="regular expressions of schemas to capture (default: all but the system ones)", validator=_regex_list),  # noqa: E501
        ConfigKey("schema.exclude.list", ConfigType.LIST, [], doc="regular expressions of schemas not to capture", validator=_regex_list),  # noqa: E501
        ConfigKey("table.include.list", ConfigType.LIST, [], doc="regular expressions of schema.table names to capture (default: all)", validator=_regex_list),  # noqa: E501
        ConfigKey("table.exclude.list", ConfigType.LIST, [], doc="regular expressions of schema.table names not to capture", validator=_regex_list),  # noqa: E501
        ConfigKey("snapshot.mode", ConfigType.STRING, "initial", doc="initial: snapshot, then stream; no_data (or never): stream only; initial_only: snapshot only; when_needed: also snapshot when the slot was lost", validator=one_of("initial", "no_data", "never", "initial_only", "when_needed")),  # noqa: E501
        ConfigKey("decimal.handling.mode", ConfigType.STRING, "precise", doc="numeric columns as Decimal (precise), FLOAT64 (double) or STRING (string)", validator=one_of("precise", "double", "string")),  # noqa: E501
        ConfigKey("tombstones.on.delete", ConfigType.BOOLEAN, True, doc="follow each delete event with a tombstone"),  # noqa: E501
        ConfigKey("max.batch.size", ConfigType.INT, 2048, doc="most records per poll", validator=at_least(1)),  # noqa: E501
        ConfigKey("poll.interval.ms", ConfigType.INT, 500, doc="longest wait for changes in one poll", validator=at_least(1)),  # noqa: E501
        ConfigKey("snapshot.fetch.size", ConfigType.INT, 10240, doc="rows read per round trip while snapshotting", validator=at_least(1)),  # noqa: E501
        ConfigKey("retriable.restart.connector.wait.ms", ConfigType.INT, 10000, doc="how long to keep reconnecting after the connection to Postgres is lost before the task fails", validator=at_least(0)),  # noqa: E501
    ]
)  # fmt: skip


def conninfo(config: Mapping[str, Any], replication: bool = False) -> str:
    from psycopg.conninfo import make_conninfo

    extra = {"replication": "database"} if replication else {}
    return make_conninfo(
        host=config["database.hostname"], port=config["database.port"],
        user=config["database.user"], password=config["database.password"] or None,
        dbname=config["database.dbname"], sslmode=config["database.sslmode"],
        application_name="millrace-connect-cdc", options=_SESSION, connect_timeout=10,
        **extra,
    )  # fmt: skip


class PostgresCdcSourceConnector(SourceConnector):
    version = VERSION
    doc = "Streams the changes of a Postgres database's tables (logical replication) into topics, in Debezium's format."  # noqa: E501
    config_def = CONFIG

    def validate(self, config: Mapping[str, str]) -> dict[str, list[str]]:
        errors = super().validate(config)
        host = (config.get("database.hostname") or "").strip()
        if host and not errors.get("database.port"):
            refused = host_error(host, int(config.get("database.port") or 5432), self.worker_config)
            if refused:
                errors.setdefault("database.hostname", []).append(refused)
        return errors

    def task_class(self) -> type[SourceTask]:
        return PostgresCdcSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.raw)]  # a slot has one reader


class _Table:
    """What the task knows of a captured table: its schemas and value converters."""

    def __init__(self, prefix: str, schema: str, table: str, columns: Sequence[pgoutput.Column],
                 not_null: set[str], decimal_mode: str) -> None:  # fmt: skip
        self.schema, self.table = schema, table
        self.topic = f"{prefix}.{schema}.{table}"
        self.columns = tuple(columns)
        self.names = [c.name for c in columns]
        fields = [
            (c.name, pgtypes.schema_for(c.type_oid, c.type_modifier, c.name not in not_null,
                                        decimal_mode))
            for c in columns
        ]  # fmt: skip
        self.converters = [
            pgtypes.converter_for(c.type_oid, c.type_modifier, decimal_mode, schema.optional)
            for c, (_, schema) in zip(columns, fields, strict=True)
        ]
        self.value_schema = struct_schema(fields, name=f"{self.topic}.Value", optional=True)
        self.key_index = [i for i, c in enumerate(columns) if c.key]
        self.key_schema: Schema | None = None
        if self.key_index:
            self.key_schema = struct_schema(
                [(columns[i].name, fields[i][1]) for i in self.key_index], name=f"{self.topic}.Key"
            )
        self.envelope = struct_schema(
            [
                ("before", self.value_schema),
                ("after", self.value_schema),
                ("source", SOURCE_SCHEMA),
                ("transaction", TRANSACTION_SCHEMA),
                ("op", Schema(Type.STRING)),
                ("ts_ms", Schema(Type.INT64, optional=True)),
            ],
            name=f"{self.topic}.Envelope",
        )
        self._fills = [pgtypes.placeholder(schema) if not schema.optional else None
                       for _, schema in fields]  # fmt: skip

    def row(self, values: Sequence[Any], partial: bool = False) -> Struct:
        """The value struct of a tuple (``partial``: only the key columns were sent)."""
        if len(values) != len(self.names):
            raise ConnectException(f"{self.topic}: a row of {len(values)} columns, expected "
                                   f"{len(self.names)}")  # fmt: skip
        converted = [
            convert(text) if text.__class__ is str else self._special(i, text, partial)
            for i, (text, convert) in enumerate(zip(values, self.converters, strict=True))
        ]
        return Struct.trusted(self.value_schema, dict(zip(self.names, converted, strict=True)))

    def _special(self, index: int, text: Any, partial: bool) -> Any:
        if text is None:
            return self._fills[index] if partial else None
        if text is pgoutput.UNCHANGED:
            kind = self.value_schema.fields[index].schema.type
            return PLACEHOLDER if kind is Type.STRING else self._fills[index]
        return self.converters[index](text)  # binary values

    def key(self, row: Struct) -> Struct | None:
        if self.key_schema is None:
            return None
        return Struct.trusted(self.key_schema, {self.names[i]: row.get_without_default(
            self.names[i]) for i in self.key_index})  # fmt: skip


SOURCE_SCHEMA = struct_schema(
    [
        ("version", Schema(Type.STRING)),
        ("connector", Schema(Type.STRING)),
        ("name", Schema(Type.STRING)),
        ("ts_ms", Schema(Type.INT64)),
        ("snapshot", Schema(Type.STRING, optional=True, default="false", name="io.debezium.data.Enum", version=1, parameters=(("allowed", "true,last,false,incremental"),))),  # noqa: E501
        ("db", Schema(Type.STRING)),
        ("sequence", Schema(Type.STRING, optional=True)),
        ("schema", Schema(Type.STRING)),
        ("table", Schema(Type.STRING)),
        ("txId", Schema(Type.INT64, optional=True)),
        ("lsn", Schema(Type.INT64, optional=True)),
        ("xmin", Schema(Type.INT64, optional=True)),
    ],
    name="io.debezium.connector.postgresql.Source",
)  # fmt: skip
TRANSACTION_SCHEMA = Schema(
    Type.STRUCT, optional=True, name="event.block", version=1,
    fields=struct_schema([("id", Schema(Type.STRING)), ("total_order", Schema(Type.INT64)),
                          ("data_collection_order", Schema(Type.INT64))]).fields,
)  # fmt: skip


class PostgresCdcSourceTask(SourceTask):
    config_def = CONFIG

    def __init__(self) -> None:
        super().__init__()
        self._catalog: Any = None  # a plain connection: catalog queries, the publication
        self._replication: Any = None
        self._stream: pgoutput.ReplicationStream | None = None
        self._snapshot: Generator[list[ConnectRecord], None, None] | None = None
        self._tables: dict[int, _Table | None] = {}  # relation id -> table (None: not captured)
        self._partition: dict[str, Any] = {}
        # Where the task stands: the end of the last whole transaction emitted, the one in
        # progress and how many of its events were emitted (the last offset's shape).
        self._lsn = 0
        self._xid: int | None = None
        self._event = -1
        self._skip: tuple[int, int] | None = None  # (xid, last event) already delivered
        self._begin: pgoutput.Begin | None = None
        self._flushed = 0
        self._streaming_done = False  # initial_only after its snapshot
        self._lost_since: float | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self, config: Mapping[str, str]) -> None:
        import psycopg

        super().start(config)
        c = self.config
        self._partition = {"server": c["topic.prefix"]}
        assert self.context is not None
        offset = self.context.offset(self._partition)
        self._catalog = psycopg.connect(conninfo(c), autocommit=True)
        self._ensure_publication()
        slot_lsn = self._slot_position()
        mode = c["snapshot.mode"]
        snapshotting = offset is None or bool(offset.get("snapshot"))
        if offset is not None and not offset.get("snapshot") and slot_lsn is None:
            if mode != "when_needed":
                raise ConnectException(
                    f"replication slot {c['slot.name']!r} is gone but the connector has "
                    "offsets in it: the changes since are lost (set snapshot.mode=when_needed "
                    "to take a new snapshot, or reset the connector's offsets)"
                )
            snapshotting = True
        if mode in ("no_data", "never"):
            snapshotting = False
        self._replication = psycopg.connect(conninfo(c, replication=True), autocommit=True)
        exported = None
        if slot_lsn is None:
            slot_lsn, exported = self._create_slot(export=snapshotting)
        if snapshotting:
            self._lsn = slot_lsn
            logger.info("%s: snapshot of %s from LSN %s", c["name"] if "name" in c else "cdc",
                        c["database.dbname"], pgoutput.format_lsn(slot_lsn))  # fmt: skip
            self._snapshot = self._snapshot_batches(exported)
        else:
            if offset is not None:
                self._lsn = max(int(offset.get("lsn") or 0), slot_lsn)
                if offset.get("txId") is not None and int(offset.get("lsn") or 0) >= slot_lsn:
                    self._skip = (int(offset["txId"]), int(offset["event"]))
            else:
                self._lsn = slot_lsn
            try:
                self._start_streaming()
            except (ConnectionError, OSError) as exc:
                # E.g. the slot is still held by a killed worker's walsender: poll retries.
                self._lost(exc)

    def stop(self) -> None:
        if self._snapshot is not None:
            self._snapshot.close()  # ends the snapshot's transaction and connection
            self._snapshot = None
        for conn in (self._replication, self._catalog):
            if conn is not None:
                with contextlib.suppress(Exception):  # closing a broken connection
                    conn.close()
        self._replication = self._stream = None
        if self.config.get("slot.drop.on.stop"):
            self._drop_slot()
        self._catalog = None

    def committed(self, offsets: Sequence[Mapping[str, Any]]) -> None:
        """Offsets up to these were committed: the slot may forget the WAL before them."""
        for offset in offsets:
            lsn = int(offset.get("lsn") or 0)
            if lsn > self._flushed and not offset.get("snapshot"):
                self._flushed = lsn
        if self._stream is not None and self._stream.flushed < self._flushed:
            self._stream.flushed = self._flushed
            try:
                self._stream.send_status()
            except ConnectionError:
                pass  # the next poll reconnects

    # --- the publication and the slot -----------------------------------------------------

    def _ensure_publication(self) -> None:
        c = self.config
        name = c["publication.name"]
        found = self._catalog.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)
        ).fetchone()
        if found:
            return
        mode = c["publication.autocreate.mode"]
        if mode == "disabled":
            raise ConnectException(f"publication {name!r} does not exist "
                                   "(publication.autocreate.mode=disabled)")  # fmt: skip
        if mode == "all_tables":
            self._catalog.execute(f"CREATE PUBLICATION {quote_ident(name)} FOR ALL TABLES")
            return
        tables = [f"{quote_ident(s)}.{quote_ident(t)}" for s, t in self._candidate_tables()]
        if not tables:
            raise ConnectException("no table matches the include and exclude lists")
        listed = ", ".join(tables)
        self._catalog.execute(f"CREATE PUBLICATION {quote_ident(name)} FOR TABLE {listed}")

    def _candidate_tables(self) -> list[tuple[str, str]]:
        rows = self._catalog.execute(
            "SELECT n.nspname, c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg\\_%%' ORDER BY 1, 2"
        ).fetchall()  # fmt: skip
        return [(s, t) for s, t in rows if self._captured(s, t)]

    def _captured(self, schema: str, table: str) -> bool:
        c = self.config
        full = f"{schema}.{table}"
        if c["schema.include.list"] and not any(
            re.fullmatch(p, schema) for p in c["schema.include.list"]
        ):
            return False
        if any(re.fullmatch(p, schema) for p in c["schema.exclude.list"]):
            return False
        if c["table.include.list"] and not any(
            re.fullmatch(p, full) for p in c["table.include.list"]
        ):
            return False
        return not any(re.fullmatch(p, full) for p in c["table.exclude.list"])

    def _slot_position(self) -> int | None:
        row = self._catalog.execute(
            "SELECT confirmed_flush_lsn::text, plugin, database FROM pg_replication_slots "
            "WHERE slot_name = %s", (self.config["slot.name"],),
        ).fetchone()  # fmt: skip
        if row is None:
            return None
        lsn, plugin, database = row
        if plugin != "pgoutput" or database != self.config["database.dbname"]:
            raise ConnectException(
                f"replication slot {self.config['slot.name']!r} belongs to {plugin} on "
                f"{database}, not pgoutput on this database"
            )
        return pgoutput.parse_lsn(lsn) if lsn else 0

    def _create_slot(self, export: bool) -> tuple[int, str | None]:
        pgconn = self._replication.pgconn
        name = pgoutput.quote_slot(self.config["slot.name"])
        how = "EXPORT_SNAPSHOT" if export else "NOEXPORT_SNAPSHOT"
        result = pgconn.exec_(f"CREATE_REPLICATION_SLOT {name} LOGICAL pgoutput {how}".encode())
        if result.status != 2:  # TUPLES_OK
            raise ConnectException(
                "could not create replication slot "
                f"{name}: {result.error_message.decode(errors='replace').strip()}"
            )
        lsn = pgoutput.parse_lsn(result.get_value(0, 1).decode())
        snapshot = result.get_value(0, 2)
        logger.info("created replication slot %s at %s", name, pgoutput.format_lsn(lsn))
        return lsn, snapshot.decode() if snapshot else None

    def _drop_slot(self) -> None:
        import psycopg

        try:
            with psycopg.connect(conninfo(self.config), autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND NOT active", (self.config["slot.name"],),
                )  # fmt: skip
        except Exception:  # noqa: BLE001 - best effort on the way out
            logger.warning("could not drop replication slot %s", self.config["slot.name"])

    # --- tables ----------------------------------------------------------------------------

    def _table(self, relation: pgoutput.Relation) -> _Table | None:
        if not self._captured(relation.schema, relation.table):
            return None
        not_null = {
            name for (name,) in self._catalog.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped AND attnotnull", (relation.relation_id,),
            ).fetchall()
        }  # fmt: skip
        return _Table(self.config["topic.prefix"], relation.schema, relation.table,
                      relation.columns, not_null, self.config["decimal.handling.mode"])  # fmt: skip

    def _describe(self, conn: Any, schema: str, table: str) -> tuple[int, pgoutput.Relation]:
        """A table as its Relation message would describe it (the key: its primary key)."""
        rows = conn.execute(
            "SELECT c.oid, a.attname, a.atttypid, a.atttypmod, "
            "  coalesce(a.attnum = ANY(i.indkey), false) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
            "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary "
            "WHERE n.nspname = %s AND c.relname = %s ORDER BY a.attnum", (schema, table),
        ).fetchall()  # fmt: skip
        columns = tuple(
            pgoutput.Column(name, oid, mod, bool(key)) for _, name, oid, mod, key in rows
        )
        relid = rows[0][0]
        return relid, pgoutput.Relation(relid, schema, table, "d", columns)

    # --- snapshot ----------------------------------------------------------------------------

    def _published_tables(self) -> list[tuple[str, str]]:
        rows = self._catalog.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
            "ORDER BY 1, 2", (self.config["publication.name"],),
        ).fetchall()  # fmt: skip
        return [(s, t) for s, t in rows if self._captured(s, t)]

    def _snapshot_batches(self, exported: str | None) -> Generator[list[ConnectRecord], None, None]:
        import psycopg

        c = self.config
        size = c["max.batch.size"]
        with psycopg.connect(conninfo(c)) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if exported:
                conn.execute(f"SET TRANSACTION SNAPSHOT '{exported}'")
            held: ConnectRecord | None = None
            batch: list[ConnectRecord] = []
            for schema, table in self._published_tables():
                relid, relation = self._describe(conn, schema, table)
                info = self._table(relation)
                self._tables[relid] = info
                if info is None:
                    continue
                columns = ", ".join(quote_ident(n) for n in info.names)
                source = f"{quote_ident(schema)}.{quote_ident(table)}"
                copy_sql = f"COPY (SELECT {columns} FROM {source}) TO STDOUT"  # noqa: S608
                with conn.cursor() as cur, cur.copy(copy_sql) as copy:
                    for values in copy.rows():
                        if held is not None:
                            batch.append(held)
                            if len(batch) >= size:
                                yield batch
                                batch = []
                        held = self._snapshot_record(info, values, last=False)
            conn.rollback()
        if held is not None:
            batch.append(self._snapshot_record_last(held))
        if batch:
            yield batch

    def _snapshot_record(self, info: _Table, values: Sequence[Any], last: bool) -> ConnectRecord:
        row = info.row(values)
        now = int(time.time() * 1000)
        source = self._source(info, now, "last" if last else "true", None, None)
        value = Struct.trusted(info.envelope, {
            "before": None, "after": row, "source": source, "op": "r", "ts_ms": now})  # fmt: skip
        offset = {"lsn": self._lsn, "snapshot": True} if not last else {"lsn": self._lsn}
        return ConnectRecord(info.topic, None, info.key_schema, info.key(row), info.envelope,
                             value, now, (), self._partition, offset)  # fmt: skip

    def _snapshot_record_last(self, record: ConnectRecord) -> ConnectRecord:
        """The snapshot's last record: its offset says the snapshot is complete."""
        value = record.value
        source = value.get("source")
        marked = Struct.trusted(source.schema, {**source.as_dict(), "snapshot": "last"})
        return record.new_record(
            value=Struct.trusted(value.schema, {**value.as_dict(), "source": marked}),
            source_offset={"lsn": self._lsn},
        )

    def _source(self, info: _Table, ts_ms: int, snapshot: str, xid: int | None,
                lsn: int | None) -> Struct:  # fmt: skip
        return Struct.trusted(SOURCE_SCHEMA, {
            "version": VERSION, "connector": "postgresql", "name": self.config["topic.prefix"],
            "ts_ms": ts_ms, "snapshot": snapshot, "db": self.config["database.dbname"],
            "sequence": None, "schema": info.schema, "table": info.table, "txId": xid,
            "lsn": lsn, "xmin": None,
        })  # fmt: skip

    # --- streaming ------------------------------------------------------------------------------

    def _start_streaming(self) -> None:
        self._stream = pgoutput.ReplicationStream(
            self._replication, self.config["slot.name"], self._lsn,
            [self.config["publication.name"]],
        )  # fmt: skip
        self._stream.flushed = max(self._flushed, 0)
        self._xid, self._event, self._begin = None, -1, None
        logger.info("streaming slot %s from %s", self.config["slot.name"],
                    pgoutput.format_lsn(self._lsn))  # fmt: skip

    def poll(self) -> Sequence[ConnectRecord]:
        if self._snapshot is not None:
            batch = next(self._snapshot, None)
            if batch is not None:
                return batch
            self._snapshot = None
            logger.info("snapshot done")
            if self.config["snapshot.mode"] == "initial_only":
                self._streaming_done = True
                return []
            try:
                self._start_streaming()
            except (ConnectionError, OSError) as exc:
                return self._lost(exc)
        if self._streaming_done:
            time.sleep(self.config["poll.interval.ms"] / 1000)
            return []
        try:
            if self._stream is None:
                self._reconnect()
            assert self._stream is not None
            records = self._read(self._stream)
            self._lost_since = None
            return records
        except (ConnectionError, OSError, _psycopg_errors()) as exc:
            return self._lost(exc)

    def _lost(self, exc: BaseException) -> list[ConnectRecord]:
        now = time.monotonic()
        if self._lost_since is None:
            self._lost_since = now
            logger.warning("lost the replication connection (%s); reconnecting", exc)
        elif (now - self._lost_since) * 1000 > self.config["retriable.restart.connector.wait.ms"]:
            raise ConnectException(f"the replication connection is lost: {exc}") from exc
        self._stream = None
        if self._replication is not None:
            with contextlib.suppress(Exception):  # already broken
                self._replication.close()
        self._replication = None
        time.sleep(0.5)
        return []

    def _reconnect(self) -> None:
        import psycopg

        if self._catalog is None or self._catalog.closed:
            self._catalog = psycopg.connect(conninfo(self.config), autocommit=True)
        self._replication = psycopg.connect(conninfo(self.config, replication=True),
                                            autocommit=True)  # fmt: skip
        # Resume after the last event handed out (emitted, maybe not yet committed).
        if self._xid is not None and self._event >= 0:
            self._skip = (self._xid, self._event)
        self._start_streaming()

    def _read(self, stream: pgoutput.ReplicationStream) -> list[ConnectRecord]:
        out: list[ConnectRecord] = []
        limit = self.config["max.batch.size"]
        timeout = self.config["poll.interval.ms"] / 1000
        for message in stream.messages(timeout, limit):
            decoded = pgoutput.decode(message.payload)
            if isinstance(decoded, pgoutput.Change):
                self._change(decoded, message.wal_start, out)
                if len(out) >= limit:
                    break
            elif isinstance(decoded, pgoutput.Begin):
                self._begin = decoded
                self._xid, self._event = decoded.xid, -1
            elif isinstance(decoded, pgoutput.Commit):
                self._lsn = decoded.end_lsn
                self._xid, self._event, self._begin = None, -1, None
                if self._skip is not None:
                    self._skip = None  # the partly delivered transaction is behind us
            elif isinstance(decoded, pgoutput.Relation):
                self._tables[decoded.relation_id] = self._table(decoded)
        return out

    def _change(self, change: pgoutput.Change, lsn: int, out: list[ConnectRecord]) -> None:
        info = self._tables.get(change.relation_id)
        if info is None:
            return  # a table not captured
        begin = self._begin
        assert begin is not None
        ts_ms = begin.commit_time_us // 1000
        events: list[tuple[str, Struct | None, Struct | None]] = []
        if change.op == "I":
            assert change.new is not None
            events.append(("c", None, info.row(change.new)))
        elif change.op == "U":
            assert change.new is not None
            new = info.row(change.new)
            old = (info.row(change.old, partial=change.old_is_key)
                   if change.old is not None else None)  # fmt: skip
            if (change.old_is_key and old is not None and info.key_schema is not None
                    and info.key(old) != info.key(new)):  # fmt: skip
                events.append(("d", old, None))
                events.append(("c", None, new))
            else:
                events.append(("u", old, new))
        else:
            assert change.old is not None
            events.append(("d", info.row(change.old, partial=change.old_is_key), None))
        now = int(time.time() * 1000)
        for op, before, after in events:
            whole = after if after is not None else before
            assert whole is not None
            key = info.key(whole)
            value = Struct.trusted(info.envelope, {
                "before": before, "after": after,
                "source": self._source(info, ts_ms, "false", begin.xid, lsn),
                "op": op, "ts_ms": now,
            })  # fmt: skip
            self._emit(info, key, info.envelope, value, ts_ms, out)
            if op == "d" and self.config["tombstones.on.delete"]:
                self._emit(info, key, None, None, ts_ms, out)

    def _emit(self, info: _Table, key: Struct | None, schema: Schema | None, value: Any,
              ts_ms: int, out: list[ConnectRecord]) -> None:  # fmt: skip
        self._event += 1
        xid = self._xid
        if self._skip is not None and self._skip[0] == xid and self._event <= self._skip[1]:
            return  # delivered before the restart
        out.append(ConnectRecord(
            info.topic, None, info.key_schema, key, schema, value, ts_ms, (),
            self._partition, {"lsn": self._lsn, "txId": xid, "event": self._event},
        ))  # fmt: skip


def _psycopg_errors() -> type[Exception]:
    import psycopg

    return psycopg.OperationalError
