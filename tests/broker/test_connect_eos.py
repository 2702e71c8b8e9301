"""Exactly-once sources (KIP-618) across a worker's kill -9: with
``exactly.once.source.support=enabled`` a source task writes each poll's records and their
offsets in one transaction, so a task restarted on another worker resumes exactly after
the last committed batch: a read_committed consumer sees every line once, in order."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_connect_distributed import Cluster
from tests.broker.test_connect_standalone import _create

pytestmark = pytest.mark.slow

LINES = 3000


def _committed_values(kafka, topic: str, until: str, timeout: float = 90) -> list[str]:
    """The topic's values as a read_committed reader sees them, once ``until`` arrived
    and nothing more came for two seconds."""
    from confluent_kafka import Consumer

    consumer = Consumer(confluent_conf(kafka, kafka.admin_a) | {
        "group.id": f"eos-read-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(500, 0.5) if m.error() is None]
            values += [m.value().decode() for m in batch]
            if until in values and quiet_until is None:
                quiet_until = time.monotonic() + 2
            if quiet_until is not None and time.monotonic() > quiet_until:
                break
    finally:
        consumer.close()
    return values


def test_a_source_task_killed_mid_stream_writes_each_record_once(kafka, tmp_path) -> None:
    topic = topic_name("eos")
    _create(kafka, topic)
    cluster = Cluster(kafka, tmp_path)
    with cluster.properties.open("a") as properties:
        properties.write("exactly.once.source.support=enabled\n")
    source = tmp_path / "in.txt"
    source.write_text("")
    stop = threading.Event()

    def append() -> None:  # 3,000 lines over about 3 s, while the worker is killed
        with source.open("a") as f:
            for start in range(0, LINES, 50):
                if stop.is_set():
                    return
                f.write("".join(f"l{i}\n" for i in range(start, start + 50)))
                f.flush()
                time.sleep(0.05)

    writer = threading.Thread(target=append, daemon=True)
    try:
        cluster.start("a")
        cluster.open_stores()
        assert cluster.configs is not None
        cluster.configs.put_connector("eos-in", {
            "connector.class": "FileStreamSource", "file": str(source), "topic": topic,
            "batch.size": "20", "exactly.once.support": "required",
        })  # fmt: skip
        cluster.wait_tasks("eos-in", 1, "RUNNING")
        writer.start()
        time.sleep(1.5)
        cluster.workers["a"].kill()  # mid-stream: a transaction is likely open
        cluster.workers["a"].wait(10)
        cluster.start("b")
        writer.join(30)
        values = _committed_values(kafka, topic, f"l{LINES - 1}")
        assert values == [f"l{i}" for i in range(LINES)], (
            f"{len(values)} values, {len(set(values))} distinct"
        )
    finally:
        stop.set()
        cluster.stop_all()
