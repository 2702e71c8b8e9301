"""Connect benchmark: ``python -m bench.connect [--quick]`` (``make bench-connect``).

One SASL broker on loopback (a throwaway Postgres metadata database), Connect workers as
``manage.py connect`` processes, and this machine's Postgres (``wal_level=logical``) as
the database the connectors read and write. One JSON line per workload, each against a
baseline measured in the same run:

* ``cdc_source``: ``--changes`` rows inserted (transactions of 1,000) into a table whose
  publication two slots were created for beforehand. Baseline: the same changes read
  straight from one slot by a replication connection (messages received, nothing done with
  them). Connector: a standalone worker running the change data capture source on the
  other slot (``snapshot.mode=no_data``) into a 3-partition topic, JSON with schemas, as a
  Debezium user runs it. Reported: changes per second, from the first change in the topic
  to the last (the topic's end offsets, polled every 100 ms). Targets: ≥ 50% of the
  baseline and ≥ 10,000 changes/s.
* ``postgres_sink``: ``--changes`` records (JSON with schemas, a struct key and a
  four-field value) in a 3-partition topic, upserted by a standalone worker running the
  Postgres sink (``tasks.max`` 3) into a table with a primary key. Baseline: the same rows
  written into the same kind of table by psycopg's fastest path, ``COPY``. Reported: rows
  per second, from the first row in the table to the last (``count(*)`` polled every 200
  ms). Target: ≥ 50% of the baseline.
* ``worker_kill``: three distributed workers; the change data capture source runs while
  rows are inserted at ~500/s; the worker running its task is killed (SIGKILL). Reported:
  seconds until the task runs on another worker (the status topic), against the bound
  ``session.timeout.ms`` + ``scheduled.rebalance.max.delay.ms`` + 5 s, and how many of the
  inserted rows never reached the topic (target 0).

Runs alternate baseline and connector (``--rounds``; medians and ranges). Every wait is
bounded by ``--timeout``; every process is stopped, every slot, topic and database dropped
on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.common import DEFAULT_POSTGRES, ROOT, emit, metadata_database, sasl_broker
from bench.replication import delete_topic, wait_until

TXN_ROWS = 1_000
PARTITIONS = 3
SESSION_TIMEOUT_MS = 6_000
REBALANCE_DELAY_MS = 3_000


def _pg_url(database: str) -> str:
    server = urlsplit(os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES)
    return server._replace(path=f"/{database}").geturl()


def _pg_params(database: str) -> dict[str, str]:
    url = urlsplit(_pg_url(database))
    return {
        "database.hostname": url.hostname or "127.0.0.1",
        "database.port": str(url.port or 5432),
        "database.user": url.username or "postgres",
        "database.password": url.password or "",
        "database.dbname": database,
    }


class Workers:
    """Connect worker processes of one benchmark, stopped on the way out."""

    def __init__(self, env: dict[str, str], work: Path, creds: dict[str, str], port: int) -> None:
        self.env, self.work = env, work
        self.client = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": creds["username"],
            "sasl.password": creds["password"],
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def _properties(self, name: str, values: dict[str, str]) -> Path:
        path = self.work / name
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path

    def start(
        self, args: list[str], ready: str, timeout: float
    ) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work / f"worker-{uuid.uuid4().hex[:6]}.log"
        process = subprocess.Popen(  # noqa: S603 - our own command line
            [sys.executable, "manage.py", "connect", *args],
            cwd=ROOT, env=self.env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.processes.append(process)
        wait_until(lambda: ready in log.read_text() or process.poll() is not None, timeout,
                   "a worker to start")  # fmt: skip
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited: {log.read_text()[-2000:]}")
        return process, log

    def standalone(self, connector: dict[str, str], timeout: float) -> subprocess.Popen[bytes]:
        worker = self._properties(f"standalone-{uuid.uuid4().hex[:6]}.properties", {
            **self.client,
            "offset.storage.file.filename": str(self.work / f"offsets-{uuid.uuid4().hex[:6]}"),
            "offset.flush.interval.ms": "5000",
        })  # fmt: skip
        conn = self.work / f"connector-{uuid.uuid4().hex[:6]}.json"
        conn.write_text(json.dumps({"name": connector["name"], "config": connector}))
        process, _ = self.start(["--standalone", str(worker), str(conn)], "connect worker ready",
                                timeout)  # fmt: skip
        return process

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def stop_all(self) -> None:
        for process in self.processes:
            self.stop(process)


def _admin(client: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client)


def _create_topic(admin: Any, name: str) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)


def _topic_records(client: dict[str, str], topic: str) -> Any:
    """A function answering the number of records in ``topic`` (its end offsets)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(client | {"group.id": f"bench-watch-{uuid.uuid4().hex[:6]}"})

    def count() -> int:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
            for p in range(PARTITIONS)
        )

    count.close = consumer.close  # type: ignore[attr-defined]
    return count


def _rate_while(count: Any, total: int, timeout: float, interval: float, started: float) -> float:
    """Items per second from the first observed item to ``total`` (polling ``count``)."""
    deadline = time.monotonic() + timeout
    first_at, first = None, 0
    while True:
        seen = count()
        now = time.monotonic()
        if first_at is None and seen > 0:
            first_at, first = now, seen
        if seen >= total:
            break
        if now > deadline:
            raise TimeoutError(f"{seen} of {total} after {timeout} s")
        time.sleep(interval)
    assert first_at is not None
    if total > first:
        return (total - first) / max(now - first_at, interval)
    # Everything arrived between two looks (a small run): count from the worker's start.
    return total / (now - started)


@contextlib.contextmanager
def _database(name: str) -> Iterator[str]:
    import psycopg

    with metadata_database("postgres", name):
        try:
            yield name
        finally:
            with psycopg.connect(_pg_url("postgres"), autocommit=True) as admin:
                _drop_slots(admin, name)


def _drop_slots(admin: Any, database: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        admin.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE database = %s AND active", (database,),
        )  # fmt: skip
        admin.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = %s AND NOT active", (database,),
        )  # fmt: skip
        if not admin.execute("SELECT 1 FROM pg_replication_slots WHERE database = %s",
                             (database,)).fetchone():  # fmt: skip
            return
        time.sleep(0.2)


# --- the change data capture source ---------------------------------------------------------


def _raw_slot_rate(
    database: str, slot: str, publication: str, changes: int, timeout: float
) -> float:
    import psycopg

    from data_plane.connect.connectors import pgoutput

    # Closed, not left by a with block: a connection in CopyBoth cannot commit.
    conn = psycopg.connect(_pg_url(database) + "?replication=database", autocommit=True)
    try:
        stream = pgoutput.ReplicationStream(conn, slot, 0, [publication])
        seen, start, first_at = 0, time.monotonic(), None
        while seen < changes:
            for message in stream.messages(1.0, 10_000):
                if message.payload[:1] == b"I":
                    if first_at is None:
                        first_at = time.monotonic()
                    seen += 1
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"raw slot: {seen} of {changes}")
        assert first_at is not None
        return changes / (time.monotonic() - first_at)
    finally:
        conn.close()


def bench_cdc(workers: Workers, changes: int, rounds: int, timeout: float) -> None:
    import psycopg

    baseline, connector = [], []
    admin = _admin(workers.client)
    for round_ in range(rounds):
        suffix = uuid.uuid4().hex[:6]
        with (
            _database(f"millrace_bench_cdc_{suffix}") as db,
            psycopg.connect(_pg_url(db), autocommit=True) as conn,
        ):
            conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, "
                         "amount numeric(12, 2), placed timestamptz, note text)")  # fmt: skip
            conn.execute("CREATE PUBLICATION bench_pub FOR TABLE orders")
            for slot in ("bench_cdc", "bench_raw"):
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            for start in range(0, changes, TXN_ROWS):
                conn.execute(
                    "INSERT INTO orders SELECT g, 'customer-' || g, g * 1.25, now(), "
                    "'a note of some length' FROM generate_series(%s::bigint, %s::bigint) g",
                    (start + 1, min(start + TXN_ROWS, changes)),
                )
            baseline.append(_raw_slot_rate(db, "bench_raw", "bench_pub", changes, timeout))
            prefix = f"bench{suffix}"
            topic = f"{prefix}.public.orders"
            _create_topic(admin, topic)
            count = _topic_records(workers.client, topic)
            started = time.monotonic()
            process = workers.standalone({
                "name": f"cdc-{suffix}", "connector.class": "PostgresCdcSource",
                **_pg_params(db), "topic.prefix": prefix, "slot.name": "bench_cdc",
                "publication.name": "bench_pub", "publication.autocreate.mode": "disabled",
                "snapshot.mode": "no_data",
            }, timeout)  # fmt: skip
            try:
                connector.append(_rate_while(count, changes, timeout, 0.1, started))
            finally:
                workers.stop(process)
                count.close()
                delete_topic(admin, topic)
        print(f"cdc round {round_ + 1}: slot {baseline[-1]:,.0f}/s, connector "
              f"{connector[-1]:,.0f}/s", file=sys.stderr)  # fmt: skip
    _report("cdc_source", "changes/s", baseline, connector, changes=changes,
            baseline_is="the same changes read straight from a replication slot")  # fmt: skip


# --- the Postgres sink ---------------------------------------------------------------------


_KEY_SCHEMA = {"type": "struct", "optional": False, "name": "orders.Key",
               "fields": [{"type": "int64", "optional": False, "field": "id"}]}  # fmt: skip
_VALUE_SCHEMA = {"type": "struct", "optional": False, "name": "orders.Value", "fields": [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "customer"},
    {"type": "double", "optional": True, "field": "amount"},
    {"type": "string", "optional": True, "field": "note"},
]}  # fmt: skip


def _row(i: int) -> tuple[int, str, float, str]:
    return i, f"customer-{i}", i * 1.25, "a note of some length"


def _produce_rows(client: dict[str, str], topic: str, changes: int) -> None:
    from confluent_kafka import Producer

    key_schema, value_schema = json.dumps(_KEY_SCHEMA), json.dumps(_VALUE_SCHEMA)
    producer = Producer(client | {"linger.ms": 20, "batch.size": 2**20, "acks": "all"})
    for i in range(1, changes + 1):
        id_, customer, amount, note = _row(i)
        key = f'{{"schema":{key_schema},"payload":{{"id":{id_}}}}}'
        value = (f'{{"schema":{value_schema},"payload":{{"id":{id_},"customer":"{customer}",'
                 f'"amount":{amount},"note":"{note}"}}}}')  # fmt: skip
        while True:
            try:
                producer.produce(topic, value.encode(), key.encode())
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)


_TABLE = ("(id bigint PRIMARY KEY, customer text NOT NULL, amount double precision, "
          "note text)")  # fmt: skip


def _copy_rate(database: str, table: str, changes: int) -> float:
    import psycopg

    with psycopg.connect(_pg_url(database)) as conn:
        conn.execute(f"CREATE TABLE {table} {_TABLE}")
        conn.commit()
        rows = [_row(i) for i in range(1, changes + 1)]
        start = time.monotonic()
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY {table} (id, customer, amount, note) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
        conn.commit()
        return changes / (time.monotonic() - start)


def bench_sink(workers: Workers, changes: int, rounds: int, timeout: float) -> None:
    import psycopg

    baseline, connector = [], []
    admin = _admin(workers.client)
    suffix = uuid.uuid4().hex[:6]
    topic = f"bench-sink-{suffix}"
    _create_topic(admin, topic)
    _produce_rows(workers.client, topic, changes)
    try:
        with _database(f"millrace_bench_sink_{suffix}") as db:
            for round_ in range(rounds):
                baseline.append(_copy_rate(db, f"copied_{round_}", changes))
                table = f"upserted_{round_}"
                with psycopg.connect(_pg_url(db), autocommit=True) as conn:
                    conn.execute(f"CREATE TABLE {table} {_TABLE}")

                    def count(conn: Any = conn, table: str = table) -> int:
                        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
                        return int(row[0])

                    started = time.monotonic()
                    process = workers.standalone({
                        "name": f"sink-{suffix}-{round_}", "connector.class": "PostgresSink",
                        "tasks.max": str(PARTITIONS), "topics": topic,
                        "connection.url": _pg_url(db), "table.name.format": table,
                        "insert.mode": "upsert", "pk.mode": "record_key",
                    }, timeout)  # fmt: skip
                    try:
                        connector.append(_rate_while(count, changes, timeout, 0.2, started))
                    finally:
                        workers.stop(process)
                print(f"sink round {round_ + 1}: COPY {baseline[-1]:,.0f}/s, connector "
                      f"{connector[-1]:,.0f}/s", file=sys.stderr)  # fmt: skip
    finally:
        delete_topic(admin, topic)
    _report("postgres_sink", "rows/s", baseline, connector, changes=changes,
            baseline_is="the same rows written by psycopg COPY")  # fmt: skip


# --- failover ------------------------------------------------------------------------------


def bench_worker_kill(workers: Workers, timeout: float) -> None:
    import psycopg

    from data_plane.connect.cluster_stores import StatusStore
    from data_plane.connect.kafka_log import KafkaBasedLog

    suffix = uuid.uuid4().hex[:6]
    topics = {k: f"_bench-connect-{k}-{suffix}" for k in ("configs", "offsets", "status")}
    properties = workers._properties(f"distributed-{suffix}.properties", {
        **workers.client, "group.id": f"bench-connect-{suffix}",
        "config.storage.topic": topics["configs"], "offset.storage.topic": topics["offsets"],
        "status.storage.topic": topics["status"], "heartbeat.interval.ms": "1000",
        "session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "scheduled.rebalance.max.delay.ms": str(REBALANCE_DELAY_MS),
        "offset.flush.interval.ms": "1000",
    })  # fmt: skip
    admin = _admin(workers.client)
    with (
        _database(f"millrace_bench_kill_{suffix}") as db,
        psycopg.connect(_pg_url(db), autocommit=True) as conn,
    ):
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, body text)")
        prefix = f"kill{suffix}"
        topic = f"{prefix}.public.events"
        _create_topic(admin, topic)
        started = [workers.start([str(properties)], "ready in cluster", timeout) for _ in range(3)]
        statuses = StatusStore(lambda callback: KafkaBasedLog(topics["status"], workers.client,
                                                              callback, name="bench"))  # fmt: skip
        statuses.start()
        from data_plane.connect.cluster_stores import ConfigStore

        configs = ConfigStore(lambda callback: KafkaBasedLog(topics["configs"], workers.client,
                                                             callback, name="bench"))  # fmt: skip
        configs.start()
        stop_writing = threading.Event()
        inserted = [0]

        def write() -> None:
            with psycopg.connect(_pg_url(db), autocommit=True) as writer:
                deadline = time.monotonic() + timeout
                while not stop_writing.is_set() and time.monotonic() < deadline:
                    n = inserted[0]
                    writer.execute(
                        "INSERT INTO events SELECT g, 'x' "
                        "FROM generate_series(%s::bigint, %s::bigint) g",
                        (n + 1, n + 50),
                    )
                    inserted[0] = n + 50
                    time.sleep(0.1)

        writer = threading.Thread(target=write, daemon=True)
        try:
            configs.put_connector("cdc", {
                "connector.class": "PostgresCdcSource", **_pg_params(db), "topic.prefix": prefix,
                "slot.name": f"kill_{suffix}", "publication.name": f"kill_{suffix}",
                "publication.autocreate.mode": "filtered", "table.include.list": "public.events",
            })  # fmt: skip

            def owner() -> str | None:
                statuses.log.read_to_end()
                task = statuses.tasks("cdc").get(0)
                return str(task["worker_id"]) if task and task.get("state") == "RUNNING" else None

            wait_until(lambda: owner() is not None, timeout, "the task to run")
            writer.start()
            time.sleep(5)
            victim_id = owner()
            victim = next(p for p, log in started
                          if f"connect worker {victim_id} ready" in log.read_text())  # fmt: skip
            victim.kill()
            killed_at = time.monotonic()
            wait_until(lambda: owner() not in (None, victim_id), timeout, "the task to move")
            failover = time.monotonic() - killed_at
            time.sleep(3)
            stop_writing.set()
            writer.join(30)
            total = inserted[0]
            seen = _ids_in_topic(workers.client, topic, total, timeout)
            lost = total - len(seen)
        finally:
            stop_writing.set()
            configs.stop()
            statuses.stop()
            for process, _ in started:
                workers.stop(process)
            for name in (topic, *topics.values()):
                delete_topic(admin, name)
    bound = (SESSION_TIMEOUT_MS + REBALANCE_DELAY_MS) / 1000 + 5
    emit("worker_kill", failover_s=round(failover, 2), bound_s=bound,
         meets_target=failover <= bound and lost == 0, rows_inserted=total, rows_lost=lost,
         session_timeout_ms=SESSION_TIMEOUT_MS,
         scheduled_rebalance_max_delay_ms=REBALANCE_DELAY_MS)  # fmt: skip


def _ids_in_topic(client: dict[str, str], topic: str, total: int, timeout: float) -> set[int]:
    from confluent_kafka import Consumer

    consumer = Consumer(client | {"group.id": f"bench-read-{uuid.uuid4().hex[:6]}",
                                  "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < total and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None and message.value():
                    after = json.loads(message.value() or b"null")["payload"]["after"]
                    if after is not None:
                        seen.add(int(after["id"]))
    finally:
        consumer.close()
    return seen


def _report(
    name: str, unit: str, baseline: list[float], connector: list[float], **extra: Any
) -> None:
    ratio = statistics.median(connector) / statistics.median(baseline)
    emit(name, unit=unit,
         connector={"median": round(statistics.median(connector)), "min": round(min(connector)),
                    "max": round(max(connector))},
         baseline={"median": round(statistics.median(baseline)), "min": round(min(baseline)),
                   "max": round(max(baseline))},
         ratio=round(ratio, 3), **extra)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round")
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--only", choices=["cdc", "sink", "kill"], action="append")
    args = parser.parse_args()
    changes, rounds = (5_000, 1) if args.quick else (args.changes, args.rounds)
    only = set(args.only or ["cdc", "sink", "kill"])
    with tempfile.TemporaryDirectory(prefix="bench-connect-") as tmp:
        work = Path(tmp)
        with sasl_broker(f"millrace_bench_connect_{os.getpid()}", work) as (env, creds, port):
            workers = Workers(env, work, creds, port)
            try:
                if "cdc" in only:
                    bench_cdc(workers, changes, rounds, args.timeout)
                if "sink" in only:
                    bench_sink(workers, changes, rounds, args.timeout)
                if "kill" in only:
                    bench_worker_kill(workers, args.timeout)
            finally:
                workers.stop_all()


if __name__ == "__main__":
    main()
