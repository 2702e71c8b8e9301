"""The Postgres change data capture source against this machine's real Postgres (with
``wal_level=logical``, which ``.ci/run`` sets), the task driven directly: snapshot then
stream in Debezium's envelope, every type's value, primary-key changes, tombstones,
resuming from a committed offset inside a transaction with nothing lost or repeated, the
slot told to forget WAL only once offsets are committed, a dropped replication
connection survived, and configs refused with the field named."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from data_plane.connect.api import SourceTaskContext
from data_plane.connect.connectors.postgres_cdc import (
    PostgresCdcSourceConnector,
    PostgresCdcSourceTask,
)
from data_plane.connect.converters import make_converter
from data_plane.connect.data import ConnectRecord

ADMIN = "host=127.0.0.1 user=postgres dbname=postgres"


def _logical() -> bool:
    try:
        with psycopg.connect(ADMIN, connect_timeout=3) as conn:
            row = conn.execute("SHOW wal_level").fetchone()
            return row is not None and row[0] == "logical"
    except psycopg.Error:
        return False


pytestmark = pytest.mark.skipif(not _logical(), reason="needs Postgres with wal_level=logical")


class Context(SourceTaskContext):
    def __init__(self, stored: dict[str, Any] | None = None) -> None:
        self.stored = stored

    def offset(self, partition: Any) -> dict[str, Any] | None:
        return self.stored


@pytest.fixture
def db() -> Iterator[str]:
    name = f"cdc_test_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield name
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        for _ in range(50):  # a walsender may take a moment to let go of its slot
            admin.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE database = %s AND NOT active", (name,),
            )  # fmt: skip
            if not admin.execute(
                "SELECT 1 FROM pg_replication_slots WHERE database = %s", (name,)
            ).fetchone():
                break
            time.sleep(0.1)
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={db}", autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _config(db: str, **extra: str) -> dict[str, str]:
    return {
        "name": "cdc", "database.hostname": "127.0.0.1", "database.user": "postgres",
        "database.dbname": db, "topic.prefix": "srv", "slot.name": "slot_" + db[-8:],
        "poll.interval.ms": "200", **extra,
    }  # fmt: skip


def _task(db: str, stored: dict[str, Any] | None = None, **extra: str) -> PostgresCdcSourceTask:
    task = PostgresCdcSourceTask()
    task.initialize(Context(stored))
    task.start(_config(db, **extra))
    return task


def _drain(task: PostgresCdcSourceTask, count: int, timeout: float = 20) -> list[ConnectRecord]:
    found: list[ConnectRecord] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        assert time.monotonic() < deadline, f"{len(found)} of {count} records: {found}"
        found.extend(task.poll())
    return found


VALUE = make_converter("value.converter", "JsonConverter", {"schemas.enable": "false"}, False)
WITH_SCHEMA = make_converter("value.converter", "JsonConverter", {}, False)


def _json(record: ConnectRecord) -> Any:
    data = VALUE.from_connect(record.topic, record.value_schema, record.value)
    return None if data is None else json.loads(data)


def _after(record: ConnectRecord) -> dict[str, Any]:
    return _json(record)["after"]  # type: ignore[no-any-return]


def test_snapshot_then_stream_in_debeziums_envelope(db: str) -> None:
    _sql(db, "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text)",
         "CREATE TABLE notes (body text)",
         "INSERT INTO customers VALUES (1, 'ann', 'a@x'), (2, 'bob', NULL)",
         "INSERT INTO notes VALUES ('no key')")  # fmt: skip
    task = _task(db)
    try:
        snapshot = _drain(task, 3)
        by_topic = sorted((r.topic, _after(r).get("id")) for r in snapshot)
        assert by_topic == [("srv.public.customers", 1), ("srv.public.customers", 2),
                            ("srv.public.notes", None)]  # fmt: skip
        assert {_json(r)["op"] for r in snapshot} == {"r"}
        assert [_json(r)["source"]["snapshot"] for r in snapshot] == ["true", "true", "last"]
        assert snapshot[-1].source_offset == {"lsn": snapshot[0].source_offset["lsn"]}
        assert all(r.source_offset.get("snapshot") for r in snapshot[:-1])  # type: ignore[union-attr]
        notes = next(r for r in snapshot if r.topic == "srv.public.notes")
        assert notes.key is None and notes.key_schema is None

        _sql(db, "BEGIN", "INSERT INTO customers VALUES (3, 'cy', NULL)",
             "UPDATE customers SET email = 'b@x' WHERE id = 2", "COMMIT",
             "UPDATE customers SET id = 20 WHERE id = 2",
             "DELETE FROM customers WHERE id = 1")  # fmt: skip
        changes = _drain(task, 2 + 3 + 2)
        shapes = [(_json(r) or {}).get("op") if r.value is not None else "tombstone"
                  for r in changes]  # fmt: skip
        assert shapes == ["c", "u", "d", "tombstone", "c", "d", "tombstone"]
        keys = [r.key.as_dict() for r in changes]  # type: ignore[union-attr]
        assert [k["id"] for k in keys] == [3, 2, 2, 2, 20, 1, 1]
        insert, update = _json(changes[0]), _json(changes[1])
        assert insert["before"] is None
        assert insert["after"] == {"id": 3, "name": "cy", "email": None}
        assert update["after"] == {"id": 2, "name": "bob", "email": "b@x"}
        source = insert["source"]
        assert source["connector"] == "postgresql" and source["name"] == "srv"
        assert (source["db"], source["schema"], source["table"]) == (db, "public", "customers")
        assert source["snapshot"] == "false" and source["txId"] == update["source"]["txId"]
        assert source["lsn"] > 0 and source["ts_ms"] > 0
        delete = _json(changes[5])
        assert delete["after"] is None and delete["before"]["id"] == 1  # the key identifies it
        moved = _json(changes[4])
        assert moved["after"] == {"id": 20, "name": "bob", "email": "b@x"}
        # The schema envelope is Debezium's, named after the topic.
        schema = json.loads(WITH_SCHEMA.from_connect("t", changes[0].value_schema,
                                                     changes[0].value))["schema"]  # fmt: skip
        assert schema["name"] == "srv.public.customers.Envelope"
        assert [f["field"] for f in schema["fields"]] == [
            "before", "after", "source", "transaction", "op", "ts_ms"]  # fmt: skip
        assert schema["fields"][1]["name"] == "srv.public.customers.Value"
        assert schema["fields"][2]["name"] == "io.debezium.connector.postgresql.Source"
    finally:
        task.stop()


def test_each_type_as_debezium_presents_it(db: str) -> None:
    _sql(db, """CREATE TABLE t (
        id bigint PRIMARY KEY, s smallint, i integer, r real, d double precision,
        n numeric(10, 2), v numeric, ok boolean, born date, at time, at3 time(3),
        seen timestamp, seen3 timestamp(3), zoned timestamptz, js jsonb, u uuid, b bytea,
        gap interval, tags text[], c char(3))""")  # fmt: skip
    task = _task(db, **{"snapshot.mode": "no_data"})
    try:
        _sql(db, """INSERT INTO t VALUES (
            9007199254740993, -2, 7, 1.5, 2.25, 12.30, -0.0042, true, '1969-12-31',
            '13:14:15.123456', '01:00:00.5', '2020-02-29 23:59:59.999999',
            '2020-02-29 23:59:59.123', '2020-01-01 10:00:00.5+02', '{"a": [1]}',
            'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff', '1 day 02:00:00',
            '{x,"y z"}', 'ab')""")  # fmt: skip
        (record,) = _drain(task, 1)
        after = _after(record)
        assert after["id"] == 9007199254740993 and after["s"] == -2 and after["i"] == 7
        assert after["r"] == 1.5 and after["d"] == 2.25 and after["ok"] is True
        assert after["n"] == "BM4="  # Decimal 12.30 at scale 2: unscaled 1230, base64
        assert after["v"] == {"scale": 4, "value": "1g=="}  # VariableScaleDecimal of -42
        assert after["born"] == -1
        assert after["at"] == 47_655_123_456  # MicroTime
        assert after["at3"] == 3_600_500  # Time (ms)
        assert after["seen"] == 1_583_020_799_999_999  # MicroTimestamp
        assert after["seen3"] == 1_583_020_799_123  # Timestamp (ms)
        assert after["zoned"] == "2020-01-01T08:00:00.5Z"  # as Java's ISO_OFFSET_DATE_TIME
        assert json.loads(after["js"]) == {"a": [1]}
        assert after["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
        assert after["b"] == "AP8="
        assert after["gap"] == 26 * 3600 * 1_000_000
        assert after["tags"] == '{x,"y z"}' and after["c"] == "ab "
        fields = {f["field"]: f for f in json.loads(
            WITH_SCHEMA.from_connect("t", record.value_schema, record.value)
        )["schema"]["fields"][1]["fields"]}  # fmt: skip
        assert fields["n"]["name"] == "org.apache.kafka.connect.data.Decimal"
        assert fields["n"]["parameters"]["scale"] == "2"
        assert fields["born"]["name"] == "io.debezium.time.Date"
        assert fields["seen"]["name"] == "io.debezium.time.MicroTimestamp"
        assert fields["zoned"]["name"] == "io.debezium.time.ZonedTimestamp"
        assert fields["id"]["optional"] is False and fields["s"]["optional"] is True
    finally:
        task.stop()


def _slot_flushed(db: str) -> str:
    with psycopg.connect(ADMIN) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE database = %s",
            (db,),
        ).fetchone()
        assert row is not None
        return str(row[0])


def test_resumes_after_the_last_committed_record_inside_a_transaction(db: str) -> None:
    _sql(db, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    task = _task(db)
    assert task.poll() == []  # an empty snapshot
    _sql(db, "INSERT INTO t SELECT g, 'first' FROM generate_series(1, 5) g")
    _sql(db, "INSERT INTO t SELECT g, 'second' FROM generate_series(6, 10) g")
    records = _drain(task, 10)
    assert [r.key.get("id") for r in records] == list(range(1, 11))  # type: ignore[union-attr]
    flushed_before = _slot_flushed(db)
    # Offsets committed up to the 7th record (the second transaction's second event).
    task.committed([records[6].source_offset])  # type: ignore[list-item]
    deadline = time.monotonic() + 10
    while _slot_flushed(db) == flushed_before:  # the slot may forget the first transaction
        assert time.monotonic() < deadline, "the slot's flushed position did not move"
        task.poll()
    task.stop()

    again = _task(db, stored=dict(records[6].source_offset or {}))
    try:
        _sql(db, "INSERT INTO t VALUES (11, 'third')")
        rest = _drain(again, 4)
        assert [r.key.get("id") for r in rest] == [8, 9, 10, 11]  # type: ignore[union-attr]
        assert again.poll() == []
    finally:
        again.stop()


def test_the_slot_keeps_what_is_not_committed(db: str) -> None:
    _sql(db, "CREATE TABLE t (id int PRIMARY KEY)")
    task = _task(db, **{"snapshot.mode": "no_data"})
    start = _slot_flushed(db)
    _sql(db, "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)")
    records = _drain(task, 2)
    for _ in range(3):
        task.poll()
    assert _slot_flushed(db) == start  # nothing committed: the slot holds it all
    task.stop()
    again = _task(db, **{"snapshot.mode": "no_data"})  # no offsets: from the slot's position
    try:
        assert [r.key.get("id") for r in _drain(again, 2)] == [1, 2]  # type: ignore[union-attr]
    finally:
        again.stop()
    assert records


def test_survives_losing_the_replication_connection(db: str) -> None:
    _sql(db, "CREATE TABLE t (id int PRIMARY KEY)")
    task = _task(db, **{"snapshot.mode": "no_data"})
    try:
        _sql(db, "INSERT INTO t SELECT g FROM generate_series(1, 3) g")
        first = _drain(task, 3)
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s", (db,),
            )  # fmt: skip
        _sql(db, "INSERT INTO t SELECT g FROM generate_series(4, 6) g")
        rest = _drain(task, 3, timeout=30)
        ids = [r.key.get("id") for r in first + rest]  # type: ignore[union-attr]
        assert ids == [1, 2, 3, 4, 5, 6]  # nothing lost, nothing twice
    finally:
        task.stop()


def test_restart_during_the_snapshot_takes_it_again(db: str) -> None:
    _sql(db, "CREATE TABLE t (id int PRIMARY KEY)",
         "INSERT INTO t SELECT g FROM generate_series(1, 30) g")  # fmt: skip
    task = _task(db, **{"max.batch.size": "10"})
    first = task.poll()
    assert len(first) == 10 and first[-1].source_offset["snapshot"]  # type: ignore[index]
    task.stop()  # stopped mid-snapshot with its offset committed
    _sql(db, "DELETE FROM t WHERE id = 5", "INSERT INTO t VALUES (31)")
    again = _task(db, stored=dict(first[-1].source_offset or {}))
    try:
        records = _drain(again, 30 + 3)
        snapshot = [r for r in records if r.value is not None and _json(r)["op"] == "r"]
        ids = sorted(r.key.get("id") for r in snapshot)  # type: ignore[union-attr]
        assert ids == [i for i in range(1, 32) if i != 5]
        # The changes made meanwhile follow (the slot was there all along): the state
        # they leave is the table's.
        changes = [(_json(r) or {}).get("op") for r in records[len(snapshot):]]  # fmt: skip
        assert changes == ["d", None, "c"]
    finally:
        again.stop()


def test_a_lost_slot_with_offsets_fails_clearly(db: str) -> None:
    _sql(db, "CREATE TABLE t (id int PRIMARY KEY)")
    stored = {"lsn": 1, "txId": None, "event": 0}
    task = PostgresCdcSourceTask()
    task.initialize(Context(stored))
    with pytest.raises(Exception, match=r"slot .* is gone"):
        task.start(_config(db))
    task.stop()


def test_bad_configs_name_the_field() -> None:
    connector = PostgresCdcSourceConnector()

    def errors(config: dict[str, str]) -> dict[str, list[str]]:
        return {k: v for k, v in connector.validate(config).items() if v}

    assert set(errors({"topic.prefix": "x", "slot.name": "Bad-Name",
                       "snapshot.mode": "sometimes"})) == {
        "database.hostname", "database.dbname", "database.user", "slot.name",
        "snapshot.mode"}  # fmt: skip
    connector.worker_config = {"postgres.allowed.hosts": "db.internal:5432"}
    refused = errors(_config("x"))
    assert list(refused) == ["database.hostname"]
    assert "not among the hosts" in refused["database.hostname"][0]
    assert errors(_config("x") | {"database.hostname": "db.internal"}) == {}
