"""Table → topic → table across a distributed Connect cluster of three worker processes:
the Postgres change data capture source reads a real Postgres's replication slot, the
Postgres sink upserts into another database. While a writer keeps inserting, updating
and deleting rows, workers are killed (kill -9), restarted and added; in the end the
destination table equals the source table, row for row, and every change reached the
topic (nothing lost; at least once)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.broker.conftest import confluent_conf
from tests.broker.test_connect_distributed import Cluster

pytestmark = pytest.mark.slow

ADMIN = "host=127.0.0.1 user=postgres dbname=postgres"
ROWS = 300  # preloaded: the snapshot
CHANGES = 900  # made while the cluster runs and workers die


def _logical() -> bool:
    try:
        with psycopg.connect(ADMIN, connect_timeout=3) as conn:
            row = conn.execute("SHOW wal_level").fetchone()
            return row is not None and row[0] == "logical"
    except psycopg.Error:
        return False


@pytest.fixture
def databases() -> Iterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    source, target = f"cdc_src_{suffix}", f"cdc_dst_{suffix}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {source}")
        admin.execute(f"CREATE DATABASE {target}")
    yield source, target
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            admin.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE database = %s AND active", (source,),
            )  # fmt: skip
            admin.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE database = %s AND NOT active", (source,),
            )  # fmt: skip
            if not admin.execute(
                "SELECT 1 FROM pg_replication_slots WHERE database = %s", (source,)
            ).fetchone():
                break
            time.sleep(0.2)
        for name in (source, target):
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _dsn(db: str) -> str:
    return f"host=127.0.0.1 user=postgres dbname={db}"


def _rows(db: str, table: str) -> list[tuple]:
    with psycopg.connect(_dsn(db)) as conn:
        try:
            return conn.execute(
                f"SELECT id, owner, balance, note FROM {table} ORDER BY id"
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            return []


class Writer(threading.Thread):
    """Inserts, updates and deletes rows in small transactions, ``CHANGES`` in all."""

    def __init__(self, db: str) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.done = 0
        self.error: BaseException | None = None
        self.rng = random.Random(7)
        # What committed, to check against the topic: every change must be there.
        self.inserted: set[int] = set()
        self.updates: dict[int, int] = {}
        self.deleted: set[int] = set()

    def run(self) -> None:
        try:
            with psycopg.connect(_dsn(self.db), autocommit=True) as conn:
                next_id = ROWS + 1
                while self.done < CHANGES:
                    inserted, updated, deleted = set(), [], set()
                    with conn.transaction():
                        for _ in range(self.rng.randint(1, 5)):
                            kind = self.rng.random()
                            target = self.rng.randint(1, next_id)
                            if kind < 0.4:
                                conn.execute(
                                    "INSERT INTO accounts VALUES (%s, %s, %s, %s)",
                                    (next_id, f"owner-{next_id}", next_id * 1.5, "new"),
                                )
                                inserted.add(next_id)
                                next_id += 1
                            elif kind < 0.85:
                                if conn.execute(
                                    "UPDATE accounts SET balance = balance + 1, note = %s "
                                    "WHERE id = %s", (f"u{self.done}", target),
                                ).rowcount:  # fmt: skip
                                    updated.append(target)
                            elif conn.execute(
                                "DELETE FROM accounts WHERE id = %s", (target,)
                            ).rowcount:
                                deleted.add(target)
                            self.done += 1
                    self.inserted |= inserted
                    self.deleted |= deleted
                    for target in updated:
                        self.updates[target] = self.updates.get(target, 0) + 1
                    time.sleep(0.03)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _owner(cluster: Cluster, connector: str) -> str | None:
    tasks = cluster.tasks(connector)
    task = tasks.get(0)
    if task is None or task.get("state") != "RUNNING":
        return None
    return str(task["worker_id"])


def _worker_name(cluster: Cluster, worker_id: str) -> str:
    """The test's name for the worker with this id (its REST-less id is host:port-ish)."""
    for name, log in cluster.logs.items():
        ready = f"connect worker {worker_id} ready"
        if cluster.workers[name].poll() is None and ready in log.read_text():
            return name
    states = {n: (p.poll(), f"connect worker {worker_id} ready" in cluster.logs[n].read_text())
              for n, p in cluster.workers.items()}  # fmt: skip
    raise AssertionError(f"no running worker has id {worker_id}: {states}")


@pytest.mark.skipif(not _logical(), reason="needs Postgres with wal_level=logical")
def test_table_to_topic_to_table_through_worker_kills(kafka, tmp_path: Path, databases) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    source, target = databases
    suffix = source[-8:]
    with psycopg.connect(_dsn(source), autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, "
                     "balance numeric(12, 2), note text)")  # fmt: skip
        conn.execute(
            "INSERT INTO accounts SELECT g, 'owner-' || g, g * 1.5, 'seed' "
            "FROM generate_series(1, %s) g", (ROWS,),
        )  # fmt: skip
    prefix = f"cdc{suffix}"
    topic = f"{prefix}.public.accounts"
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    for f in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        f.result(30)

    cluster = Cluster(kafka, tmp_path)
    json_converters = {
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    }
    writer = Writer(source)
    try:
        for name in ("a", "b", "c"):
            cluster.start(name)
        cluster.open_stores()
        assert cluster.configs is not None
        cluster.configs.put_connector("pg-in", {
            "connector.class": "PostgresCdcSource", "tasks.max": "1",
            "database.hostname": "127.0.0.1", "database.user": "postgres",
            "database.dbname": source, "topic.prefix": prefix, "slot.name": f"e2e_{suffix}",
            "publication.name": f"pub_{suffix}", "publication.autocreate.mode": "filtered",
            "table.include.list": "public.accounts", **json_converters,
        })  # fmt: skip
        cluster.configs.put_connector("pg-out", {
            "connector.class": "PostgresSink", "tasks.max": "2", "topics": topic,
            "connection.url": f"postgresql://postgres@127.0.0.1:5432/{target}",
            "table.name.format": "accounts", "insert.mode": "upsert",
            "pk.mode": "record_key", "delete.enabled": "true", "auto.create": "true",
            "exactly.once": "true",
            **json_converters,
        })  # fmt: skip
        cluster.wait_tasks("pg-in", 1, "RUNNING")
        cluster.wait_tasks("pg-out", 2, "RUNNING")
        _wait_equal(source, target, timeout=90)  # the snapshot arrived

        writer.start()
        # kill -9 the worker running the source task, while changes flow.
        time.sleep(2)
        victim_id = _wait_owner(cluster, "pg-in")
        victim = _worker_name(cluster, victim_id)
        cluster.workers[victim].kill()
        cluster.workers[victim].wait(10)
        # It runs elsewhere after the session timeout and the scheduled delay.
        deadline = time.monotonic() + 60
        while _owner(cluster, "pg-in") in (None, victim_id):
            assert time.monotonic() < deadline, cluster.tasks("pg-in")
            time.sleep(0.3)
        # The killed worker comes back (a rebalance), then another worker dies.
        cluster.start(victim)
        time.sleep(3)
        second = next(n for n in ("a", "b", "c") if n != victim)
        cluster.workers[second].kill()
        cluster.workers[second].wait(10)
        cluster.start("d")  # and a new one joins

        writer.join(120)
        assert not writer.is_alive(), "the writer did not finish"
        assert writer.error is None, writer.error
        _wait_equal(source, target, timeout=120)
        # Every committed change reached the topic (some may be there twice).
        events = _events(kafka, topic)
        created = {i for op, i in events if op in ("c", "r")}
        assert writer.inserted <= created
        assert set(range(1, ROWS + 1)) <= created
        assert writer.deleted <= {i for op, i in events if op == "d"}
        seen_updates: dict[int, int] = {}
        for op, i in events:
            if op == "u":
                seen_updates[i] = seen_updates.get(i, 0) + 1
        short = {i: n for i, n in writer.updates.items() if seen_updates.get(i, 0) < n}
        assert not short, f"updates missing from the topic: {short}"
    finally:
        cluster.stop_all()


def _events(kafka, topic: str) -> list[tuple[str, int]]:
    """(op, id) of every change event in ``topic`` (tombstones left out)."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_conf(kafka, kafka.admin_a) | {
        "group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})  # fmt: skip
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(3)}  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    found: list[tuple[str, int]] = []
    positions = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + 60
    while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for message in consumer.consume(500, 0.5):
            if message.error() is not None:
                continue
            positions[message.partition()] = message.offset() + 1
            if message.value() is None:
                continue
            payload = json.loads(message.value())["payload"]
            row = payload["after"] or payload["before"]
            found.append((payload["op"], int(row["id"])))
    consumer.close()
    assert all(positions[p] >= ends[p] for p in ends), (positions, ends)
    return found


def _wait_owner(cluster: Cluster, connector: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owner = _owner(cluster, connector)
        if owner is not None:
            return owner
        time.sleep(0.3)
    raise AssertionError(f"{connector}: no task RUNNING: {cluster.tasks(connector)}")


def _wait_equal(source: str, target: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    want: list[tuple] = []
    got: list[tuple] = []
    while time.monotonic() < deadline:
        want, got = _rows(source, "accounts"), _rows(target, "accounts")
        if want and want == got:
            return
        time.sleep(0.5)
    missing = set(want) - set(got)
    extra = set(got) - set(want)
    raise AssertionError(
        f"{len(want)} source rows, {len(got)} destination rows; missing {sorted(missing)[:5]}, "
        f"extra {sorted(extra)[:5]}"
    )
