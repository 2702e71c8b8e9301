"""The Postgres sink against this machine's Postgres (127.0.0.1:5432, user postgres).

The tests drive the task as the worker does (initialize, start, open, put, pre_commit)
and read the tables through a connection of their own, in a database made for this
module (dropped at the end) whose default time zone is not UTC.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import psycopg
import pytest

from data_plane.connect.api import (
    ConnectException,
    RetriableException,
    SinkTaskContext,
    TopicPartition,
)
from data_plane.connect.config import ConfigException
from data_plane.connect.connectors.postgres_sink import (
    PostgresSinkConnector,
    PostgresSinkTask,
    parse_url,
)
from data_plane.connect.data import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    DATE_SCHEMA,
    DECIMAL,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    TIME_SCHEMA,
    TIMESTAMP_SCHEMA,
    ConnectRecord,
    Schema,
    Struct,
    Type,
    decimal_schema,
    struct_schema,
)

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
UTC = datetime.UTC


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    name = f"sink_test_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        # Sessions default to another zone: the sink must not depend on it.
        admin.execute(f"ALTER DATABASE \"{name}\" SET timezone TO 'America/New_York'")
    try:
        yield name
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(database: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(f"{ADMIN} dbname={database}", autocommit=True) as conn:
        yield conn


@pytest.fixture
def table() -> str:
    return f"t_{uuid.uuid4().hex[:8]}"


class FakeContext(SinkTaskContext):
    def __init__(self) -> None:
        self.rewinds: list[dict[TopicPartition, int]] = []

    def assignment(self) -> set[TopicPartition]:
        return set()

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.rewinds.append(dict(offsets))

    def request_commit(self) -> None:
        pass


MakeTask = Callable[..., PostgresSinkTask]


@pytest.fixture
def make_task(database: str) -> Iterator[MakeTask]:
    tasks: list[PostgresSinkTask] = []

    def make(config: Mapping[str, str] | None = None, **_: Any) -> PostgresSinkTask:
        task = PostgresSinkTask()
        task.initialize(FakeContext())
        task.start(
            {
                "name": "sink",
                "connection.url": f"jdbc:postgresql://127.0.0.1:5432/{database}?user=postgres",
                **(config or {}),
            }
        )
        tasks.append(task)
        return task

    yield make
    for task in tasks:
        task.stop()


def rewinds(task: PostgresSinkTask) -> list[dict[TopicPartition, int]]:
    assert isinstance(task.context, FakeContext)
    return task.context.rewinds


def record(
    topic: str, key: Any, value: Any, offset: int, partition: int = 0, **schemas: Schema
) -> ConnectRecord:
    return ConnectRecord(
        topic=topic,
        partition=partition,
        key_schema=schemas.get("key_schema", key.schema if isinstance(key, Struct) else None),
        key=key,
        value_schema=schemas.get(
            "value_schema", value.schema if isinstance(value, Struct) else None
        ),
        value=value,
        kafka_offset=offset,
    )


def rows(db: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    return db.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall()


def column_types(db: psycopg.Connection[Any], table: str) -> dict[str, tuple[str, str]]:
    found = db.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return {name: (kind, nullable) for name, kind, nullable in found}


def primary_key(db: psycopg.Connection[Any], table: str) -> list[str]:
    found = db.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)",
        [f'"{table}"'],
    ).fetchall()
    return [name for (name,) in found]


KEY = struct_schema([("id", INT64_SCHEMA)], name="test.Key")
VALUE = struct_schema(
    [("id", INT64_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA), ("qty", OPTIONAL_INT64_SCHEMA)],
    name="test.Value",
)


def kv(
    topic: str, offset: int, id_: int, name: str | None, qty: int | None = None
) -> ConnectRecord:
    value = Struct(VALUE, {"id": id_, "name": name, "qty": qty})
    return record(topic, Struct(KEY, {"id": id_}), value, offset)


def tombstone(topic: str, offset: int, id_: int) -> ConnectRecord:
    return record(topic, Struct(KEY, {"id": id_}), None, offset)


# --- upserts, deletes, collapsing -------------------------------------------------------------


def test_upserts_by_struct_key_and_tombstones_delete(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    task = make_task({"auto.create": "true"})
    tp = TopicPartition(table, 0)
    task.put([kv(table, 0, 1, "a", 1), kv(table, 1, 2, "b", 2), kv(table, 2, 3, "c", 3)])
    # Buffered: nothing is in Postgres until pre_commit.
    assert db.execute("SELECT to_regclass(%s)", [f'"{table}"']).fetchone() == (None,)
    assert task.pre_commit({tp: 3}) == {tp: 3}
    assert rows(db, table) == [(1, "a", 1), (2, "b", 2), (3, "c", 3)]
    assert primary_key(db, table) == ["id"]

    task.put([kv(table, 3, 2, "B"), tombstone(table, 4, 3), tombstone(table, 5, 99)])
    assert task.pre_commit({tp: 6}) == {tp: 6}
    assert rows(db, table) == [(1, "a", 1), (2, "B", None)]


def test_several_changes_of_one_key_in_a_batch_end_in_the_right_row(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    db.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, name text, qty int, note text)')
    db.execute(
        f"INSERT INTO \"{table}\" VALUES (1, 'old', 0, 'kept'), (2, 'two', 2, 'x'), "
        "(4, 'four', 4, 'y')"
    )
    task = make_task({"batch.size": "2"})  # several statements, one transaction

    def change(offset: int, id_: int, value: dict[str, Any] | None) -> ConnectRecord:
        return record(table, {"id": id_}, None if value is None else {"id": id_, **value}, offset)

    changes = [
        change(0, 1, {"name": "a"}),
        change(1, 2, {"name": "t1"}),
        change(2, 1, {"qty": 5}),  # merged with the change before: name a, qty 5
        change(3, 2, None),  # deleted ...
        change(4, 3, {"name": "three"}),
        change(5, 2, {"name": "t2"}),  # ... then inserted afresh: no qty, no note
        change(6, 3, None),  # inserted, then deleted: absent
        change(7, 4, None),
        change(8, 5, {"name": "v1", "qty": 1}),
        change(9, 5, {"name": "v2"}),
        change(10, 5, {"name": "v3"}),
    ]
    task.put(changes)
    task.pre_commit({TopicPartition(table, 0): 11})
    assert rows(db, table) == [
        (1, "a", 5, "kept"),
        (2, "t2", None, None),
        (5, "v3", 1, None),
    ]


def test_a_failing_record_mid_batch_leaves_no_rows_and_the_next_put_succeeds(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    db.execute(
        f'CREATE TABLE "{table}" '
        "(id bigint PRIMARY KEY, name text CHECK (name <> 'bad'), qty bigint)"
    )
    task = make_task({"batch.size": "2"})
    batch = [kv(table, i, i, "bad" if i == 3 else f"n{i}") for i in range(5)]
    with pytest.raises(ConnectException, match=table) as failed:
        task.put(batch)  # written in statements of 2: the second fails
    assert not isinstance(failed.value, RetriableException)
    assert rows(db, table) == []

    # Bad data found before writing: no key.
    with pytest.raises(ConnectException, match="no key"):
        task.put([kv(table, 5, 5, "ok"), record(table, None, {"id": 6}, 6)])
    assert rows(db, table) == []

    task.put([kv(table, 7, 7, "good"), kv(table, 8, 8, "fine")])
    assert task.pre_commit({TopicPartition(table, 0): 9}) == {TopicPartition(table, 0): 9}
    assert rows(db, table) == [(7, "good", None), (8, "fine", None)]

    # A bad record still buffered at pre_commit fails it (the worker must not commit).
    task = make_task({"batch.size": "100"})
    task.put([kv(table, 9, 9, "bad")])
    with pytest.raises(ConnectException, match="check constraint"):
        task.pre_commit({TopicPartition(table, 0): 10})
    assert rows(db, table) == [(7, "good", None), (8, "fine", None)]


def test_primitive_keys_and_the_other_pk_modes(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    tp = TopicPartition(table, 0)
    value = struct_schema([("name", STRING_SCHEMA)], name="v")

    # A primitive key: the column pk.fields names (default id), typed by the key schema.
    task = make_task({"auto.create": "true", "pk.fields": "code"})
    task.put(
        [
            record(table, "x", Struct(value, {"name": "one"}), 0, key_schema=STRING_SCHEMA),
            record(table, "x", Struct(value, {"name": "two"}), 1, key_schema=STRING_SCHEMA),
            record(table, "y", Struct(value, {"name": "y"}), 2, key_schema=STRING_SCHEMA),
            record(table, "y", None, 3, key_schema=STRING_SCHEMA),
        ]
    )
    task.pre_commit({tp: 4})
    assert rows(db, table) == [("x", "two")]
    assert column_types(db, table)["code"] == ("text", "NO")

    # pk.mode=kafka: a row per record, a redelivered record written once.
    kafka = f"{table}_kafka"
    task = make_task({"auto.create": "true", "pk.mode": "kafka", "delete.enabled": "false"})
    same = Struct(value, {"name": "same"})
    task.put([record(kafka, None, same, 0), record(kafka, None, same, 1)])
    task.put([record(kafka, None, same, 1), record(kafka, None, None, 2)])
    task.pre_commit({TopicPartition(kafka, 0): 3})
    assert rows(db, kafka) == [(kafka, 0, 0, "same"), (kafka, 0, 1, "same")]
    assert primary_key(db, kafka) == ["__connect_topic", "__connect_partition", "__connect_offset"]

    # pk.mode=record_value, and insert.mode=update, which writes existing rows only.
    by_value = f"{table}_value"
    db.execute(f'CREATE TABLE "{by_value}" (code text PRIMARY KEY, name text)')
    db.execute(f"INSERT INTO \"{by_value}\" VALUES ('a', 'old')")
    task = make_task(
        {
            "pk.mode": "record_value",
            "pk.fields": "code",
            "delete.enabled": "false",
            "insert.mode": "update",
        }
    )
    task.put([record(by_value, None, {"code": c, "name": "new"}, i) for i, c in enumerate("ab")])
    task.pre_commit({TopicPartition(by_value, 0): 2})
    assert rows(db, by_value) == [("a", "new")]

    # pk.mode=none with insert.mode=insert: plain inserts, duplicates and all.
    plain = f"{table}_plain"
    db.execute(f'CREATE TABLE "{plain}" (name text)')
    task = make_task({"pk.mode": "none", "insert.mode": "insert", "delete.enabled": "false"})
    task.put([record(plain, None, {"name": "dup"}, i) for i in range(2)])
    task.pre_commit({TopicPartition(plain, 0): 2})
    assert rows(db, plain) == [("dup",), ("dup",)]


# --- schemas: auto.create, auto.evolve, schemaless ---------------------------------------------


def test_auto_create_maps_connect_types(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    schema = struct_schema(
        [
            ("id", INT32_SCHEMA),
            ("i8", INT8_SCHEMA),
            ("i16", INT16_SCHEMA),
            ("i64", Schema(Type.INT64, optional=True)),
            ("f32", FLOAT32_SCHEMA),
            ("f64", FLOAT64_SCHEMA),
            ("flag", BOOLEAN_SCHEMA),
            ("name", OPTIONAL_STRING_SCHEMA),
            ("raw", BYTES_SCHEMA),
            ("amount", decimal_schema(2)),
            ("day", DATE_SCHEMA),
            ("clock", TIME_SCHEMA),
            ("moment", TIMESTAMP_SCHEMA),
            ("tags", Schema(Type.ARRAY, optional=True, value_schema=STRING_SCHEMA)),
            (
                "attrs",
                Schema(
                    Type.MAP, optional=True, key_schema=STRING_SCHEMA, value_schema=INT32_SCHEMA
                ),
            ),
        ],
        name="all.Value",
    )
    key = struct_schema([("id", INT32_SCHEMA)])
    values = {
        "id": 1,
        "i8": -8,
        "i16": 1600,
        "i64": 2**40,
        "f32": 1.5,
        "f64": 2.25,
        "flag": True,
        "raw": b"\x00\x01\xff",
        "amount": decimal.Decimal("12.34"),
        "day": datetime.date(2024, 2, 29),
        "clock": datetime.time(8, 15, 30, 250000),
        # An instant at +02:00 is written as its UTC wall clock.
        "moment": datetime.datetime(
            2024, 2, 29, 12, 30, 15, 123000, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
        ),
        "tags": ["a", "b"],
        "attrs": {"x": 1},
    }
    task = make_task({"auto.create": "true"})
    task.put([record(table, Struct(key, {"id": 1}), Struct(schema, values), 0)])
    task.pre_commit({TopicPartition(table, 0): 1})

    assert column_types(db, table) == {
        "id": ("integer", "NO"),
        "i8": ("smallint", "NO"),
        "i16": ("smallint", "NO"),
        "i64": ("bigint", "YES"),
        "f32": ("real", "NO"),
        "f64": ("double precision", "NO"),
        "flag": ("boolean", "NO"),
        "name": ("text", "YES"),
        "raw": ("bytea", "NO"),
        "amount": ("numeric", "NO"),
        "day": ("date", "NO"),
        "clock": ("time without time zone", "NO"),
        "moment": ("timestamp without time zone", "NO"),
        "tags": ("jsonb", "YES"),
        "attrs": ("jsonb", "YES"),
    }
    assert primary_key(db, table) == ["id"]
    assert rows(db, table) == [
        (
            1,
            -8,
            1600,
            2**40,
            1.5,
            2.25,
            True,
            None,
            b"\x00\x01\xff",
            decimal.Decimal("12.34"),
            datetime.date(2024, 2, 29),
            datetime.time(8, 15, 30, 250000),
            datetime.datetime(2024, 2, 29, 10, 30, 15, 123000),
            ["a", "b"],
            {"x": 1},
        )
    ]


def test_auto_evolve_adds_optional_columns_only(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    v1 = struct_schema([("id", INT64_SCHEMA), ("name", STRING_SCHEMA)], name="v")
    email, age = ("email", OPTIONAL_STRING_SCHEMA), ("age", INT32_SCHEMA)
    v2 = struct_schema([*((f.name, f.schema) for f in v1.fields), email], name="v")
    v3 = struct_schema([*((f.name, f.schema) for f in v2.fields), age], name="v")
    tp = TopicPartition(table, 0)

    def put(task: PostgresSinkTask, schema: Schema, offset: int, **values: Any) -> None:
        task.put([record(table, Struct(KEY, {"id": values["id"]}), Struct(schema, values), offset)])
        task.pre_commit({tp: offset + 1})

    fixed = make_task({"auto.create": "true"})
    put(fixed, v1, 0, id=1, name="a")
    with pytest.raises(ConnectException, match=r"no column\(s\) \['email'\].*auto.evolve"):
        put(fixed, v2, 1, id=2, name="b", email="b@example.com")

    evolving = make_task({"auto.create": "true", "auto.evolve": "true"})
    put(evolving, v2, 1, id=2, name="b", email="b@example.com")
    assert rows(db, table) == [(1, "a", None), (2, "b", "b@example.com")]
    assert column_types(db, table)["email"] == ("text", "YES")
    with pytest.raises(ConnectException, match=r"'age'.*not optional"):
        put(evolving, v3, 2, id=3, name="c", age=30)
    assert rows(db, table) == [(1, "a", None), (2, "b", "b@example.com")]


def test_schemaless_maps(make_task: MakeTask, db: psycopg.Connection[Any], table: str) -> None:
    tp = TopicPartition(table, 0)
    task = make_task({"auto.create": "true"})
    task.put([record(table, {"id": 1}, {"id": 1, "name": "a"}, 0)])
    with pytest.raises(ConnectException, match=r"auto\.create.*schemaless"):
        task.pre_commit({tp: 1})

    task = make_task()
    task.put([record(table, {"id": 1}, {"id": 1, "name": "a"}, 0)])
    with pytest.raises(ConnectException, match=r"does not exist.*auto\.create=true"):
        task.pre_commit({tp: 1})

    db.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, name text, doc jsonb)')
    task = make_task()
    task.put(
        [
            record(table, {"id": 1}, {"id": 1, "name": "a", "doc": {"k": [1, None]}}, 0),
            record(table, {"id": 2}, {"id": 2, "name": "b"}, 1),
        ]
    )
    task.pre_commit({tp: 2})
    assert rows(db, table) == [(1, "a", {"k": [1, None]}), (2, "b", None)]


# --- Debezium ------------------------------------------------------------------------------------


def debezium(prefix: str) -> tuple[Schema, Schema, Schema]:
    """Key, row and envelope schemas as Debezium's Postgres connector writes them."""

    def named(type_: Type, name: str) -> Schema:
        return Schema(type_, optional=True, name=name, version=1)

    price = Schema(
        Type.BYTES,
        optional=True,
        name=DECIMAL,
        version=1,
        parameters=(("scale", "2"), ("connect.decimal.precision", "10")),
    )
    variable = struct_schema(
        [("scale", INT32_SCHEMA), ("value", BYTES_SCHEMA)],
        name="io.debezium.data.VariableScaleDecimal",
        optional=True,
    )
    row = struct_schema(
        [
            ("id", INT32_SCHEMA),
            ("name", OPTIONAL_STRING_SCHEMA),
            ("born", named(Type.INT32, "io.debezium.time.Date")),
            ("seen", named(Type.INT64, "io.debezium.time.MicroTimestamp")),
            ("zoned", named(Type.STRING, "io.debezium.time.ZonedTimestamp")),
            ("at", named(Type.INT64, "io.debezium.time.MicroTime")),
            ("price", price),
            ("ratio", variable),
            ("doc", named(Type.STRING, "io.debezium.data.Json")),
            ("ref", named(Type.STRING, "io.debezium.data.Uuid")),
        ],
        name=f"{prefix}.Value",
        optional=True,
    )
    key = struct_schema([("id", INT32_SCHEMA)], name=f"{prefix}.Key")
    envelope = struct_schema(
        [("before", row), ("after", row), ("op", STRING_SCHEMA), ("ts_ms", OPTIONAL_INT64_SCHEMA)],
        name=f"{prefix}.Envelope",
    )
    return key, row, envelope


def test_debezium_change_events(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    topic = f"server.public.{table}"  # the table is the topic's last part
    key, row, envelope = debezium(f"server.public.{table}")
    born, seen = datetime.date(2024, 2, 29), datetime.datetime(2024, 2, 29, 12, 30, 15, 123456)
    ref = uuid.uuid4()

    def event(
        offset: int, op: str, id_: int, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> ConnectRecord:
        value = Struct(
            envelope,
            {
                "before": None if before is None else Struct(row, {"id": id_, **before}),
                "after": None if after is None else Struct(row, {"id": id_, **after}),
                "op": op,
            },
        )
        return record(topic, Struct(key, {"id": id_}), value, offset)

    full = {
        "name": "read",
        "born": (born - datetime.date(1970, 1, 1)).days,
        "seen": (seen - datetime.datetime(1970, 1, 1)) // datetime.timedelta(microseconds=1),
        "zoned": "2024-02-29T12:30:15.5+02:00",
        "at": ((8 * 60 + 15) * 60 + 30) * 1_000_000 + 250_000,
        "price": decimal.Decimal("12.34"),
        "ratio": Struct(
            row.field("ratio").schema,  # type: ignore[union-attr]
            {"scale": 3, "value": (-12345).to_bytes(2, "big", signed=True)},
        ),
        "doc": '{"a": [1, 2]}',
        "ref": str(ref),
    }
    task = make_task({"auto.create": "true"})
    task.put(
        [
            event(0, "r", 1, None, full),
            event(1, "c", 2, None, {"name": "created"}),
            event(2, "u", 1, {"name": "read"}, {**full, "name": "updated"}),
            event(3, "d", 2, {"name": "created"}, None),
            record(topic, Struct(key, {"id": 2}), None, 4),  # the tombstone after a delete
            record(topic, None, Struct(envelope, {"op": "t"}), 5),  # a truncate: skipped
        ]
    )
    task.pre_commit({TopicPartition(topic, 0): 6})

    assert rows(db, table) == [
        (
            1,
            "updated",
            born,
            seen,
            datetime.datetime(2024, 2, 29, 10, 30, 15, 500000, tzinfo=UTC),
            datetime.time(8, 15, 30, 250000),
            decimal.Decimal("12.34"),
            decimal.Decimal("-12.345"),
            {"a": [1, 2]},
            ref,
        )
    ]
    types = {name: kind for name, (kind, _) in column_types(db, table).items()}
    assert types == {
        "id": "integer",
        "name": "text",
        "born": "date",
        "seen": "timestamp without time zone",
        "zoned": "timestamp with time zone",
        "at": "time without time zone",
        "price": "numeric",
        "ratio": "numeric",
        "doc": "jsonb",
        "ref": "uuid",
    }
    precision = db.execute(
        "SELECT numeric_precision, numeric_scale FROM information_schema.columns "
        "WHERE table_name = %s AND column_name = 'price'",
        [table],
    ).fetchone()
    assert precision == (10, 2)
    assert primary_key(db, table) == ["id"]


def test_debezium_events_without_schemas(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    db.execute(f'CREATE TABLE "{table}" (id int PRIMARY KEY, name text)')
    topic = f"server.public.{table}"

    def event(offset: int, op: str, id_: int, after: dict[str, Any] | None) -> ConnectRecord:
        value = {"before": None, "after": None if after is None else {"id": id_, **after}, "op": op}
        return record(topic, {"id": id_}, value, offset)

    task = make_task()
    task.put(
        [
            event(0, "c", 1, {"name": "one"}),
            event(1, "c", 2, {"name": "two"}),
            event(2, "u", 1, {"name": "uno"}),
            event(3, "d", 2, None),
            record(topic, {"id": 2}, None, 4),
            event(5, "t", 0, None),
        ]
    )
    task.pre_commit({TopicPartition(topic, 0): 6})
    assert rows(db, table) == [(1, "uno")]


def test_utc_wall_clocks_keep_their_instant_in_timestamptz_columns(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    """Debezium's timestamps are UTC wall clocks without a zone: a table made by hand with
    timestamptz columns gets the right instant although the database's zone is New York."""
    db.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, seen timestamptz)')
    micros = Schema(Type.INT64, name="io.debezium.time.MicroTimestamp", version=1)
    value = struct_schema([("id", INT64_SCHEMA), ("seen", micros)], name="v")
    moment = datetime.datetime(2024, 7, 1, 12, 0, tzinfo=UTC)
    micros_since_epoch = int(moment.timestamp()) * 1_000_000
    task = make_task()
    task.put(
        [
            record(
                table,
                Struct(KEY, {"id": 1}),
                Struct(value, {"id": 1, "seen": micros_since_epoch}),
                0,
            )
        ]
    )
    task.pre_commit({TopicPartition(table, 0): 1})
    assert rows(db, table) == [(1, moment)]


# --- exactly once ----------------------------------------------------------------------------


def test_exactly_once_stores_offsets_with_the_rows_and_a_new_task_resumes_there(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    offsets_table = f"{table}_offsets"
    config = {
        "auto.create": "true",
        "exactly.once": "true",
        "offsets.table": offsets_table,
        "name": f"eo-{table}",
    }
    tp0, tp1 = TopicPartition(table, 0), TopicPartition(table, 1)
    first = make_task(config)
    first.open({tp0, tp1})
    assert rewinds(first) == []  # nothing stored yet
    first.put(
        [
            record(table, Struct(KEY, {"id": 1}), Struct(VALUE, {"id": 1, "name": "x"}), 0),
            record(table, Struct(KEY, {"id": 1}), None, 1),  # deleted again
            record(table, Struct(KEY, {"id": 2}), Struct(VALUE, {"id": 2, "name": "y"}), 2),
            record(table, Struct(KEY, {"id": 3}), Struct(VALUE, {"id": 3, "name": "z"}), 0, 1),
        ]
    )
    assert first.pre_commit({tp0: 3, tp1: 1}) == {tp0: 3, tp1: 1}
    assert rows(db, table) == [(2, "y", None), (3, "z", None)]
    stored = db.execute(
        f'SELECT connector, topic, "partition", next_offset FROM "{offsets_table}" ORDER BY 3'
    ).fetchall()
    assert stored == [(f"eo-{table}", table, 0, 3), (f"eo-{table}", table, 1, 1)]
    first.stop()

    # A new task (after a crash before the group's commit): rewinds to the stored offsets,
    # and skips records it is handed below them (the worker applies rewinds after a poll).
    second = make_task(config)
    second.open({tp0, tp1})
    assert rewinds(second) == [{tp0: 3, tp1: 1}]
    second.put(
        [
            record(table, Struct(KEY, {"id": 1}), Struct(VALUE, {"id": 1, "name": "x"}), 0),
            record(table, Struct(KEY, {"id": 2}), Struct(VALUE, {"id": 2, "name": "new"}), 3),
        ]
    )
    # The group is told the stored offsets, not the worker's position before the rewind.
    assert second.pre_commit({tp0: 1, tp1: 1}) == {tp0: 4, tp1: 1}
    assert rows(db, table) == [(2, "new", None), (3, "z", None)]  # id 1 not resurrected
    assert db.execute(
        f'SELECT next_offset FROM "{offsets_table}" WHERE "partition" = 0'
    ).fetchone() == (4,)


def test_exactly_once_rows_and_offsets_commit_together(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    offsets_table = f"{table}_offsets"
    task = make_task(
        {"auto.create": "true", "exactly.once": "true", "offsets.table": offsets_table}
    )
    tp = TopicPartition(table, 0)
    task.open({tp})
    task.put([kv(table, 0, 0, "kept")])
    task.pre_commit({tp: 1})
    # The offsets write fails: the rows of its transaction must not stay.
    db.execute(f'ALTER TABLE "{offsets_table}" ADD CHECK (next_offset < 3)')
    task.put([kv(table, i, i, "lost") for i in range(1, 4)])
    with pytest.raises(ConnectException, match="check constraint"):
        task.pre_commit({tp: 4})
    assert rows(db, table) == [(0, "kept", None)]
    assert db.execute(f'SELECT next_offset FROM "{offsets_table}"').fetchall() == [(1,)]


def test_exactly_once_fences_a_second_writer_of_a_partition(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    config = {"auto.create": "true", "exactly.once": "true", "offsets.table": f"{table}_offsets"}
    tp = TopicPartition(table, 0)
    zombie, owner = make_task(config), make_task(config)
    zombie.open({tp})
    owner.open({tp})
    owner.put([kv(table, 0, 1, "owner")])
    owner.pre_commit({tp: 1})
    zombie.put([kv(table, 0, 1, "zombie"), kv(table, 1, 2, "zombie")])
    with pytest.raises(ConnectException, match="another task"):
        zombie.pre_commit({tp: 2})
    assert rows(db, table) == [(1, "owner", None)]


# --- connections -----------------------------------------------------------------------------


def terminate(db: psycopg.Connection[Any], name: str) -> None:
    killed = db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()",
        [f"millrace-sink-{name}"],
    ).fetchall()
    assert killed == [(True,)]


def test_a_lost_connection_is_retriable_and_the_task_reconnects(
    make_task: MakeTask, db: psycopg.Connection[Any], table: str
) -> None:
    name = f"lost-{table}"
    tp = TopicPartition(table, 0)
    task = make_task({"auto.create": "true", "batch.size": "1", "name": name})
    task.put([kv(table, 0, 1, "a")])
    terminate(db, name)
    with pytest.raises(RetriableException):
        task.put([kv(table, 1, 2, "b")])
    task.put([kv(table, 1, 2, "b")])  # the worker puts the batch again
    assert rows(db, table) == [(1, "a", None), (2, "b", None)]

    # At pre_commit: nothing is committed this time, the buffer stays for the next.
    task = make_task({"name": f"{name}-2"})
    task.put([kv(table, 2, 3, "c")])
    assert task.pre_commit({tp: 2}) == {tp: 2}
    task.put([kv(table, 3, 4, "d")])
    terminate(db, f"{name}-2")
    assert task.pre_commit({tp: 4}) == {}
    assert task.pre_commit({tp: 4}) == {tp: 4}
    assert [r[0] for r in rows(db, table)] == [1, 2, 3, 4]


def test_an_unreachable_database_is_retriable(make_task: MakeTask) -> None:
    task = make_task({"connection.url": "postgresql://postgres@127.0.0.1:1/x", "batch.size": "1"})
    with pytest.raises(RetriableException, match=r"127\.0\.0\.1:1\b"):
        task.put([kv("t", 0, 1, "a")])


# --- configuration -----------------------------------------------------------------------------

GOOD = {
    "name": "sink",
    "connector.class": "PostgresSink",
    "topics": "t",
    "connection.url": "jdbc:postgresql://db.invalid:5432/app?user=u&password=s3cret",
}


def errors_of(
    config: Mapping[str, str], worker: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    connector = PostgresSinkConnector()
    connector.worker_config = dict(worker or {})
    return {k: v for k, v in connector.validate(config).items() if v}


def test_validate_names_the_keys_without_connecting() -> None:
    assert errors_of(GOOD) == {}  # db.invalid: never resolved, never connected to
    assert errors_of({**GOOD, "connection.url": "postgresql://u:p@db.invalid/app"}) == {}
    assert set(errors_of({**GOOD, "insert.mode": "merge"})) == {"insert.mode"}
    assert set(errors_of({**GOOD, "pk.mode": "primary"})) == {"pk.mode"}
    assert set(errors_of({**GOOD, "batch.size": "0"})) == {"batch.size"}
    found = errors_of({**GOOD, "pk.mode": "kafka"})
    assert set(found) == {"delete.enabled"} and "record_key" in found["delete.enabled"][0]
    assert errors_of({**GOOD, "pk.mode": "kafka", "delete.enabled": "false"}) == {}
    found = errors_of({**GOOD, "pk.mode": "none", "delete.enabled": "false"})
    assert set(found) == {"pk.mode"} and "insert.mode=upsert" in found["pk.mode"][0]
    assert set(
        errors_of({**GOOD, "pk.mode": "kafka", "delete.enabled": "false", "pk.fields": "a,b"})
    ) == {"pk.fields"}
    assert set(errors_of({k: v for k, v in GOOD.items() if k != "connection.url"})) == {
        "connection.url"
    }
    for url in [
        "mysql://db/app",
        "jdbc:postgresql://db.invalid:99999/app?password=s3cret",
        "postgresql://u:s3cret@db.invalid/",
        "jdbc:postgresql://a:5432,b:5432/app",
        "postgresql://u:s3cret@db.invalid/app?host=elsewhere",
    ]:
        found = errors_of({**GOOD, "connection.url": url})
        assert set(found) == {"connection.url"}, url
        assert "s3cret" not in str(found)


def test_hosts_the_worker_does_not_allow_are_refused() -> None:
    worker = {"postgres.allowed.hosts": "db.internal:5432, other.internal"}
    found = errors_of({**GOOD, "connection.url": "postgresql://127.0.0.1:5432/app"}, worker)
    assert set(found) == {"connection.url"} and "not among" in found["connection.url"][0]
    assert errors_of({**GOOD, "connection.url": "postgresql://db.internal/app"}, worker) == {}
    assert errors_of({**GOOD, "connection.url": "postgresql://other.internal:6/a"}, worker) == {}
    # Files on the worker's machine are not for connectors of a hosted worker.
    url = "postgresql://db.internal/app?sslmode=verify-full&sslrootcert=/etc/shadow"
    assert set(errors_of({**GOOD, "connection.url": url}, worker)) == {"connection.url"}
    assert errors_of({**GOOD, "connection.url": url}) == {}

    connector = PostgresSinkConnector()
    connector.worker_config = worker
    with pytest.raises(ConfigException) as refused:
        connector.start({**GOOD, "connection.url": "postgresql://127.0.0.1/app"})
    assert refused.value.name == "connection.url"
    connector.start({**GOOD, "connection.url": "postgresql://db.internal/app"})
    configs = connector.task_configs(3)
    assert len(configs) == 3 and all(c["name"] == "sink" for c in configs)
    assert connector.task_class() is PostgresSinkTask


def test_both_url_forms() -> None:
    def parts(text: str) -> tuple[Any, ...]:
        url = parse_url(text)
        return url.host, url.port, url.dbname, url.user, url.password, dict(url.params)

    assert parts(
        "jdbc:postgresql://db:6543/app?user=u&password=p%40ss&ssl=true&prepareThreshold=0"
    ) == ("db", 6543, "app", "u", "p@ss", {"sslmode": "require"})
    assert parts("postgresql://u:p%40ss@db/my%20app?application_name=x&connectTimeout=3") == (
        "db",
        5432,
        "my app",
        "u",
        "p@ss",
        {"application_name": "x", "connect_timeout": "3"},
    )
    assert parse_url("postgres://[::1]:5433/app").host == "::1"
    assert "s3cret" not in repr(parse_url("postgresql://u:s3cret@db/app"))


def test_a_task_refuses_inconsistent_config(make_task: MakeTask) -> None:
    with pytest.raises(ConfigException) as refused:
        make_task({"pk.mode": "record_value"})
    assert refused.value.name == "delete.enabled"
    with pytest.raises(ConfigException) as refused:
        make_task({"connection.url": "postgresql://db.invalid"})
    assert refused.value.name == "connection.url"
