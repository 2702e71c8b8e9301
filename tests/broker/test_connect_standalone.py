"""A standalone Connect worker (``manage.py connect --standalone``) as its own process
against a broker: file source → topic → file sink, checked in the topic and in the
file; a stop and restart carries on exactly where it was (offsets committed on the way
out); a kill -9 loses nothing (at least once); bad records go to a dead letter queue
with Kafka Connect's error headers while the good ones flow."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.broker.conftest import ROOT, confluent_conf
from tests.broker.test_clients import topic_name

pytestmark = pytest.mark.slow


def _properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def _worker_config(kafka, tmp: Path, **extra: str) -> dict[str, str]:
    key = kafka.admin_a
    return {
        "bootstrap.servers": kafka.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        # As a Java worker config would have it; the worker translates it.
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{key.key_id}" password="{key.secret}";',
        "offset.storage.file.filename": str(tmp / "connect.offsets"),
        "offset.flush.interval.ms": "500",
        **extra,
    }


class Worker:
    def __init__(self, tmp: Path, env: dict[str, str], configs: list[Path]) -> None:
        self.log = tmp / f"connect-{uuid.uuid4().hex[:6]}.log"
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "connect", "--standalone", *map(str, configs)],
            cwd=ROOT,
            env=env,
            stdout=open(self.log, "wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while "connect worker ready" not in self.log.read_text():
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.process.send_signal(sig)
        self.process.wait(timeout=60)


def _metrics(url: str) -> dict[str, float]:
    """The samples of a Prometheus text page, by name and labels."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def _wait_lines(path: Path, count: int, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.2)
    raise AssertionError(f"{path.name}: {len(lines)} lines, wanted {count}")


def _topic_values(kafka, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        confluent_conf(kafka, kafka.admin_a)
        | {"group.id": f"check-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.5):
            if m.error() is None:
                values.append(m.value())
    time.sleep(1.0)  # nothing more arrives
    values += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return values


def _create(kafka, *topics: str, key=None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_conf(kafka, key or kafka.admin_a))
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(30)


def test_file_source_to_topic_to_file_sink_and_restarts(kafka, tmp_path: Path) -> None:
    topic = topic_name("connect-lines")
    _create(kafka, topic)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("".join(f"line {i} é\n" for i in range(100)))
    worker = _properties(
        tmp_path / "worker.properties",
        _worker_config(
            kafka,
            tmp_path,
            **{
                # Only a stop commits in this test: the restart proves that it does.
                "offset.flush.interval.ms": "600000",
                "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            },
        ),
    )
    source = _properties(
        tmp_path / "source.properties",
        {
            "name": "lines-in",
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(source_file),
            "topic": topic,
        },
    )
    sink = tmp_path / "sink.json"
    sink.write_text(
        json.dumps(
            {
                "name": "lines-out",
                "config": {
                    "connector.class": "FileStreamSink",
                    "file": str(sink_file),
                    "topics": topic,
                },
            }
        )
    )
    first = Worker(tmp_path, kafka.env, [worker, source, sink])
    assert _wait_lines(sink_file, 100) == [f"line {i} é" for i in range(100)]
    # What the topic holds: the lines as UTF-8 strings, in order.
    assert _topic_values(kafka, topic, 100) == [f"line {i} é".encode() for i in range(100)]
    first.stop()

    # Offsets were committed on the way out: a restart adds only the new lines.
    with source_file.open("a") as f:
        f.write("".join(f"line {i} é\n" for i in range(100, 150)))
        f.write("partial")  # no newline yet: not a line
    second = Worker(tmp_path, kafka.env, [worker, source, sink])
    lines = _wait_lines(sink_file, 150)
    time.sleep(1.5)
    assert sink_file.read_text().splitlines() == [f"line {i} é" for i in range(150)]
    with source_file.open("a") as f:
        f.write(" end\n")
    assert _wait_lines(sink_file, 151)[-1] == "partial end"

    # kill -9: nothing is lost; what was sent after the last commit may come again.
    with source_file.open("a") as f:
        f.write("".join(f"more {i}\n" for i in range(200)))
    _wait_lines(sink_file, 200)
    second.stop(signal.SIGKILL)
    third = Worker(tmp_path, kafka.env, [worker, source, sink])
    lines = _wait_lines(sink_file, 351)
    third.stop()
    lines = sink_file.read_text().splitlines()
    expected = (
        [f"line {i} é" for i in range(150)] + ["partial end"] + [f"more {i}" for i in range(200)]
    )
    assert set(lines) == set(expected)
    assert lines[:151] == expected[:151]
    assert sorted(set(lines), key=expected.index) == expected


def test_bad_records_go_to_the_dead_letter_queue_with_error_headers(kafka, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic, dlq = topic_name("connect-json"), topic_name("connect-dlq")
    _create(kafka, topic, dlq)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    values = [b'{"n": 1}', b"not json", b'{"n": 2}', b"{broken", b'{"n": 3}']
    for v in values:
        producer.produce(topic, v)
    producer.flush(30)
    sink_file = tmp_path / "out.txt"
    worker = _properties(
        tmp_path / "worker.properties",
        _worker_config(
            kafka,
            tmp_path,
            **{
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable": "false",
                "metrics.port": "0",
            },
        ),
    )
    name = f"json-out-{uuid.uuid4().hex[:4]}"
    sink = _properties(
        tmp_path / "sink.properties",
        {
            "name": name,
            "errors.log.enable": "true",
            "connector.class": "FileStreamSink",
            "file": str(sink_file),
            "topics": topic,
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.context.headers.enable": "true",
            "transforms": "add",
            "transforms.add.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.add.topic.field": "from",
        },
    )
    running = Worker(tmp_path, kafka.env, [worker, sink])
    try:
        lines = _wait_lines(sink_file, 3)
        # The worker's metrics count what happened, per connector and task.
        found = re.search(r"connect metrics on (http://\S+)", running.log.read_text())
        assert found, running.log.read_text()[-2000:]
        deadline = time.monotonic() + 30
        while True:
            metrics = _metrics(found.group(1))
            labels = f'connector="{name}",task="0"'
            if metrics.get(f"millrace_connect_deadletterqueue_produce_total{{{labels}}}") == 2:
                break
            assert time.monotonic() < deadline, metrics
            time.sleep(0.5)
        assert metrics[f"millrace_connect_sink_records_read_total{{{labels}}}"] == 5
        assert metrics[f"millrace_connect_sink_records_put_total{{{labels}}}"] == 3
        assert metrics[f"millrace_connect_records_skipped_total{{{labels}}}"] == 2
        state = f'millrace_connect_task_state{{connector="{name}",state="RUNNING",task="0"}}'
        assert metrics[state] == 1
    finally:
        running.stop()
    # The task's log lines name the connector and the task.
    tolerated = [line for line in running.log.read_text().splitlines() if "tolerated" in line]
    assert tolerated and all(f"connector={name}" in line and "task=0" in line
                             for line in tolerated), tolerated  # fmt: skip
    assert [json.loads(line) for line in lines] == [{"n": n, "from": topic} for n in (1, 2, 3)]
    from confluent_kafka import Consumer

    consumer = Consumer(
        confluent_conf(kafka, kafka.admin_a)
        | {"group.id": f"dlq-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([dlq])
    dead = []
    deadline = time.monotonic() + 30
    while len(dead) < 2 and time.monotonic() < deadline:
        dead += [m for m in consumer.consume(10, 0.5) if m.error() is None]
    consumer.close()
    assert [m.value() for m in dead] == [b"not json", b"{broken"]
    headers = dict(dead[0].headers())
    assert headers["__connect.errors.topic"] == topic.encode()
    assert headers["__connect.errors.offset"] == b"1"
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert headers["__connect.errors.connector.name"].startswith(b"json-out-")
    assert b"JsonConverter" in headers["__connect.errors.class.name"]


def test_a_connector_runs_as_the_key_its_config_names(kafka, tmp_path: Path) -> None:
    """Kafka's client overrides: the worker's key may write the topic, the connector's own
    (``producer.override.*``, a key that may only read ``shared-`` topics) may not, so the
    task fails for want of the connector's ACLs, and nothing reaches the topic."""
    topic = topic_name("connect-as")
    _create(kafka, topic)
    source_file = tmp_path / "in.txt"
    source_file.write_text("one\ntwo\n")
    reader = kafka.reader_a
    worker = _properties(tmp_path / "worker.properties", _worker_config(kafka, tmp_path))
    source = _properties(
        tmp_path / "source.properties",
        {
            "name": f"as-reader-{uuid.uuid4().hex[:4]}",
            "connector.class": "FileStreamSource",
            "file": str(source_file),
            "topic": topic,
            "producer.override.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{reader.key_id}" password="{reader.secret}";'
            ),
        },
    )
    running = Worker(tmp_path, kafka.env, [worker, source])
    try:
        deadline = time.monotonic() + 60
        refused = ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")
        # (the reader key may write nothing: the broker refuses it a producer id, or the
        # topic, whichever the producer asks for first)
        while not any(code in running.log.read_text() for code in refused):
            assert time.monotonic() < deadline, running.log.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        running.stop()
    assert reader.secret not in running.log.read_text()
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_conf(kafka, kafka.admin_a) | {"group.id": "count-as"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] == 0
    finally:
        consumer.close()
