"""Distributed Connect workers (``manage.py connect worker.properties``) as processes
against a broker: they form a group with protocol type ``connect``, share a connector's
tasks, keep configs, offsets and statuses in the cluster's compacted topics in Kafka
Connect's formats, follow target states, and when a worker is killed its tasks move to
the other after the scheduled delay, losing no record."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from data_plane.connect.cluster_stores import ConfigStore, StatusStore
from data_plane.connect.kafka_log import KafkaBasedLog
from tests.broker.conftest import ROOT, confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_standalone import _create, _wait_lines

pytestmark = pytest.mark.slow


class Cluster:
    """The Connect cluster's topics, read and written from the test as the REST API will."""

    def __init__(self, kafka, tmp: Path) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.kafka = kafka
        self.tmp = tmp
        self.group = f"connect-{suffix}"
        self.topics = {k: f"_connect-{k}-{suffix}" for k in ("configs", "offsets", "status")}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        key = kafka.admin_a
        self.properties = tmp / "worker.properties"
        self.properties.write_text(
            "".join(
                f"{k}={v}\n"
                for k, v in {
                    "bootstrap.servers": kafka.bootstrap,
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-256",
                    "sasl.username": key.key_id,
                    "sasl.password": key.secret,
                    "group.id": self.group,
                    "config.storage.topic": self.topics["configs"],
                    "offset.storage.topic": self.topics["offsets"],
                    "status.storage.topic": self.topics["status"],
                    "offset.storage.partitions": "3",
                    "status.storage.partitions": "2",
                    "heartbeat.interval.ms": "500",
                    "session.timeout.ms": "3000",
                    "rebalance.timeout.ms": "10000",
                    "scheduled.rebalance.max.delay.ms": "2000",
                    "offset.flush.interval.ms": "500",
                    # A killed worker's sink consumers leave their group this soon
                    # (librdkafka's default is 45 s).
                    "consumer.session.timeout.ms": "6000",
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                }.items()
            )
        )
        self.configs: ConfigStore | None = None
        self.statuses: StatusStore | None = None

    def start(self, name: str) -> None:
        log = self.tmp / f"worker-{name}.log"
        self.logs[name] = log
        self.workers[name] = subprocess.Popen(
            [sys.executable, "manage.py", "connect", str(self.properties)],
            cwd=ROOT,
            env=self.kafka.env,
            stdout=open(log, "wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while "ready in cluster" not in log.read_text():
            assert self.workers[name].poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)

    def open_stores(self) -> None:
        conf = confluent_conf(self.kafka, self.kafka.admin_a)

        def factory(topic):
            return lambda callback: KafkaBasedLog(topic, conf, callback, name="test")

        self.configs = ConfigStore(factory(self.topics["configs"]))
        self.configs.start()
        self.statuses = StatusStore(factory(self.topics["status"]))
        self.statuses.start()

    def tasks(self, connector: str) -> dict[int, dict]:
        assert self.statuses is not None
        self.statuses.log.read_to_end()
        return self.statuses.tasks(connector)

    def wait_tasks(
        self, connector: str, count: int, state: str, timeout: float = 60, one_worker=False
    ) -> dict:
        deadline = time.monotonic() + timeout
        found: dict[int, dict] = {}
        while time.monotonic() < deadline:
            found = self.tasks(connector)
            if (
                len(found) >= count
                and all(found.get(i, {}).get("state") == state for i in range(count))
                and (not one_worker or len({t["worker_id"] for t in found.values()}) == 1)
            ):
                return found
            time.sleep(0.3)
        raise AssertionError(f"{connector}: tasks {found}, wanted {count} {state}")

    def stop_all(self) -> None:
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        for store in (self.configs, self.statuses):
            if store is not None:
                store.stop()


def test_workers_share_tasks_follow_states_and_take_over_from_a_dead_one(kafka, tmp_path) -> None:
    from confluent_kafka import Producer

    source_topic = topic_name("dist-in")
    _create(kafka, source_topic)
    # A 4-partition topic for the sink's tasks to share.
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    sink_topic = topic_name("dist-many")
    for f in admin.create_topics([NewTopic(sink_topic, 4, 1)]).values():
        f.result(30)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    for i in range(400):
        producer.produce(sink_topic, f"r{i}".encode(), partition=i % 4)
    producer.flush(30)

    cluster = Cluster(kafka, tmp_path)
    try:
        cluster.start("a")
        cluster.start("b")
        cluster.open_stores()
        assert cluster.configs is not None
        out = tmp_path / "out.txt"
        cluster.configs.put_connector(
            "many-out",
            {
                "connector.class": "FileStreamSink",
                "tasks.max": "4",
                "topics": sink_topic,
                "file": str(out),
            },
        )
        tasks = cluster.wait_tasks("many-out", 4, "RUNNING")
        # Both workers run some of the tasks.
        owners = {t["worker_id"] for t in tasks.values()}
        assert len(owners) == 2, tasks
        assert sorted(_wait_lines(out, 400)) == sorted(f"r{i}" for i in range(400))

        # A source connector: its offsets land in the offsets topic in Kafka's format.
        source_file = tmp_path / "in.txt"
        source_file.write_text("".join(f"s{i}\n" for i in range(50)))
        cluster.configs.put_connector(
            "lines-in",
            {
                "connector.class": "FileStreamSource",
                "file": str(source_file),
                "topic": source_topic,
            },
        )
        cluster.wait_tasks("lines-in", 1, "RUNNING")

        # Paused, then resumed: every task says so in the status topic.
        cluster.configs.put_target_state("many-out", "PAUSED")
        cluster.wait_tasks("many-out", 4, "PAUSED")
        cluster.configs.put_target_state("many-out", "STARTED")
        cluster.wait_tasks("many-out", 4, "RUNNING")

        # The source's offset reached the offsets topic, keyed as Kafka Connect keys it.
        key = json.dumps(["lines-in", {"filename": str(source_file)}], separators=(",", ":"))
        expected = {"position": source_file.stat().st_size}
        deadline = time.monotonic() + 30
        latest = None
        while time.monotonic() < deadline and latest != expected:
            latest = _latest(kafka, cluster.topics["offsets"]).get(key.encode())
            time.sleep(0.5)
        assert latest == expected

        # kill -9 a worker (not the group's leader, a, which started first and so knows
        # what b ran): b's work waits the scheduled delay, then a runs every task, and
        # nothing is lost.
        cluster.workers["b"].kill()
        for i in range(400, 500):
            producer.produce(sink_topic, f"r{i}".encode(), partition=i % 4)
        producer.flush(30)
        deadline = time.monotonic() + 60
        lines: set[str] = set()
        while time.monotonic() < deadline:
            lines = set(out.read_text().splitlines())
            if all(f"r{i}" in lines for i in range(500)):
                break
            time.sleep(0.5)
        assert all(f"r{i}" in lines for i in range(500)), sorted(lines)[-5:]
        # The records alone do not show it (a's consumers take b's partitions through the
        # sink's group): every task must report RUNNING on a, the survivor.
        survivor = cluster.wait_tasks("many-out", 4, "RUNNING", one_worker=True)
        assert len({t["worker_id"] for t in survivor.values()}) == 1

        # Deleted: the surviving worker stops its tasks.
        cluster.configs.remove_connector("many-out")
        cluster.wait_tasks("many-out", 4, "UNASSIGNED")  # on the surviving worker
        lines_before = len(out.read_text().splitlines())
        producer.produce(sink_topic, b"after-delete", partition=0)
        producer.flush(30)
        time.sleep(3)
        assert "after-delete" not in out.read_text().splitlines()
        assert len(out.read_text().splitlines()) == lines_before
    finally:
        cluster.stop_all()


def _latest(kafka, topic: str) -> dict[bytes, object]:
    """The last value of each key in ``topic`` (JSON-decoded)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        confluent_conf(kafka, kafka.admin_a)
        | {"group.id": f"read-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    found: dict[bytes, object] = {}
    quiet_until = time.monotonic() + 5
    while time.monotonic() < quiet_until:
        for m in consumer.consume(100, 0.3):
            if m.error() is None and m.key() is not None:
                found[m.key()] = json.loads(m.value()) if m.value() is not None else None
                quiet_until = min(time.monotonic() + 1.0, quiet_until + 1.0)
    consumer.close()
    return found
