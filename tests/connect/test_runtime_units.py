"""The worker's pieces without brokers: properties files, offsets files, the submitted
records' committable offsets, error tolerance, and config validation naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_plane.connect.api import RetriableException
from data_plane.connect.config import ConfigException
from data_plane.connect.data import STRING_SCHEMA, ConnectRecord
from data_plane.connect.errors import ErrorPolicy, ToleranceExceeded, ToleranceOperator
from data_plane.connect.offsets import FileOffsetStore, offset_key
from data_plane.connect.properties import load_config, parse_properties
from data_plane.connect.tasks import SubmittedRecords, client_config
from data_plane.connect.worker import validate_connector_config


def test_properties_as_java_reads_them() -> None:
    text = (
        "# a comment\n! another\n"
        "name=local-file-source\n"
        "connector.class : FileStreamSource\n"
        "tasks.max 1\n"
        "file=/tmp/a\\\n    b.txt\n"
        "transforms.r.replacement=$1\\u00e9\n"
        "empty=\n"
        "   \n"
    )
    assert parse_properties(text) == {
        "name": "local-file-source",
        "connector.class": "FileStreamSource",
        "tasks.max": "1",
        "file": "/tmp/ab.txt",
        "transforms.r.replacement": "$1é",
        "empty": "",
    }


def test_json_connector_configs_in_both_shapes(tmp_path: Path) -> None:
    nested = tmp_path / "a.json"
    nested.write_text(json.dumps({"name": "sink", "config": {"tasks.max": 2, "topics": "t"}}))
    flat = tmp_path / "b.json"
    flat.write_text(json.dumps({"name": "src", "topic": "t"}))
    assert load_config(nested) == {"name": "sink", "tasks.max": "2", "topics": "t"}
    assert load_config(flat) == {"name": "src", "topic": "t"}


def test_offsets_file_survives_a_new_process_and_keys_by_value(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    store = FileOffsetStore(path)
    key = offset_key("c", {"filename": "/x", "a": 1})
    store.put("c", {key: {"position": 10}})
    again = FileOffsetStore(path)
    assert again.get("c", {"a": 1, "filename": "/x"}) == {"position": 10}  # order ignored
    assert again.get("other", {"a": 1, "filename": "/x"}) is None
    again.put("c", {key: None})
    assert FileOffsetStore(path).connector_offsets("c") == []
    with pytest.raises(ValueError):
        again.put("c", {offset_key("d", {}): {"x": 1}})


def _record(partition: str, position: int) -> ConnectRecord:
    return ConnectRecord(
        "t", None, None, None, STRING_SCHEMA, "v",
        source_partition={"file": partition}, source_offset={"position": position},
    )  # fmt: skip


def test_only_the_acknowledged_prefix_of_each_source_partition_is_committable() -> None:
    submitted = SubmittedRecords()
    a1, a2, a3 = (submitted.submit(_record("a", p), "c") for p in (1, 2, 3))
    b1 = submitted.submit(_record("b", 7), "c")
    submitted.ack(a1)
    submitted.ack(a3)  # a2 is still in flight: a3 must wait for it
    submitted.ack(b1)
    assert submitted.committable() == {
        offset_key("c", {"file": "a"}): {"position": 1},
        offset_key("c", {"file": "b"}): {"position": 7},
    }
    assert submitted.committable() == {}
    submitted.ack(a2)
    assert submitted.committable() == {offset_key("c", {"file": "a"}): {"position": 3}}
    assert submitted.in_flight == 0


def _policy(**changes: str) -> ErrorPolicy:
    return ErrorPolicy.from_config(changes)


def test_tolerance_none_fails_and_all_skips() -> None:
    def boom() -> None:
        raise ValueError("bad record")

    with pytest.raises(ToleranceExceeded):
        ToleranceOperator(_policy(), "c-0").execute("VALUE_CONVERTER", boom)
    tolerant = ToleranceOperator(_policy(**{"errors.tolerance": "all"}), "c-0")
    assert tolerant.execute("VALUE_CONVERTER", boom) is None
    assert tolerant.failed == 1 and tolerant.last_failure is not None
    assert tolerant.execute("VALUE_CONVERTER", lambda: 5) == 5


def test_retriable_failures_are_retried_until_the_timeout() -> None:
    now = [0.0]
    calls = []

    def flaky() -> str:
        calls.append(now[0])
        if len(calls) < 3:
            raise RetriableException("not yet")
        return "ok"

    def sleep(s: float) -> None:
        now[0] += s

    policy = _policy(**{"errors.retry.timeout": "10000"})
    op = ToleranceOperator(policy, "c-0", sleep=sleep, clock=lambda: now[0])
    assert op.execute("TASK_POLL", flaky) == "ok"
    assert calls == pytest.approx([0.0, 0.3, 0.9])
    always = ToleranceOperator(_policy(), "c-0", sleep=sleep, clock=lambda: now[0])
    with pytest.raises(ToleranceExceeded):  # no retry timeout: fails at once
        always.execute("TASK_POLL", lambda: (_ for _ in ()).throw(RetriableException("x")))


def test_connector_validation_names_each_bad_key() -> None:
    errors = validate_connector_config(
        {
            "name": "s",
            "connector.class": "FileStreamSink",
            "tasks.max": "zero",
            "errors.tolerance": "some",
        },
        {},
    )
    assert set(errors) == {"tasks.max", "errors.tolerance", "topics"}
    assert "exactly one of topics and topics.regex" in errors["topics"][0]
    unknown = validate_connector_config({"name": "s", "connector.class": "Nope"}, {})
    assert "unknown connector 'Nope'" in unknown["connector.class"][0]
    hosted = validate_connector_config(
        {"name": "s", "connector.class": "FileStreamSource", "topic": "t", "file": "../etc"},
        {"file.root": "/srv/connect"},
    )
    assert hosted == {"file": ["'../etc' is outside the directory this worker allows"]}


def test_client_settings_from_a_java_worker_config() -> None:
    worker = {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="mk_1" password="s\\"e";',
        "producer.linger.ms": "20",
        "consumer.fetch.min.bytes": "1",
        "offset.flush.interval.ms": "1000",
    }
    assert client_config(worker, "producer.") == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "mk_1",
        "sasl.password": 's"e',
        "linger.ms": "20",
    }


def test_a_config_exception_names_its_key() -> None:
    exc = ConfigException("transforms.x.type", "unknown transform")
    assert exc.name == "transforms.x.type" and "transforms.x.type" in str(exc)


def test_exactly_once_sources_are_validated_against_the_worker() -> None:
    source = {"name": "s", "connector.class": "FileStreamSource", "file": "/tmp/x", "topic": "t"}
    standalone = {"bootstrap.servers": "127.0.0.1:9092", "offset.storage.file.filename": "/o"}
    distributed = {"bootstrap.servers": "127.0.0.1:9092", "offset.storage.topic": "offsets",
                   "exactly.once.source.support": "enabled"}  # fmt: skip
    required = {**source, "exactly.once.support": "required"}
    assert "exactly.once.support" in validate_connector_config(required, standalone)
    assert validate_connector_config(required, distributed) == {}
    interval = {**source, "transaction.boundary": "connector"}
    assert "transaction.boundary" in validate_connector_config(interval, distributed)


def test_a_connector_may_run_as_another_principal_as_the_worker_allows() -> None:
    from data_plane.connect.tasks import client_overrides

    config = {
        "name": "s", "connector.class": "FileStreamSource", "file": "/tmp/x", "topic": "t",
        "producer.override.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="KEY2" password="p\\"w";',
        "producer.override.linger.ms": "50",
    }  # fmt: skip
    assert client_overrides(config, "producer") == {
        "sasl.username": "KEY2", "sasl.password": 'p"w', "linger.ms": "50"}  # fmt: skip
    assert client_overrides(config, "consumer") == {}
    worker = {"bootstrap.servers": "127.0.0.1:9092", "offset.storage.file.filename": "/o"}
    assert validate_connector_config(config, worker) == {}  # Kafka's default policy: All
    principal = {**worker, "connector.client.config.override.policy": "Principal"}
    assert list(validate_connector_config(config, principal)) == ["producer.override.linger.ms"]
    none = {**worker, "connector.client.config.override.policy": "None"}
    assert set(validate_connector_config(config, none)) == {
        "producer.override.sasl.jaas.config", "producer.override.linger.ms"}  # fmt: skip
