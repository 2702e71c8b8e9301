"""Debian's Sarama (1.22, a Go client still in wide use), built offline from Debian's Go
packages, against a real broker: create a topic, produce, list topics (DescribeConfigs
v0), consume in a group with commits (OffsetCommit v1 unless a retention is set), read
the committed offsets back. The scenario is ``tests/clients/sarama/main.go``.

These runs pin Kafka 0.10.2 (Produce v2 and Fetch v3: message format v1, converted both
ways), 0.11 (the first with record batches; Sarama signs in with SaslHandshake v0 and bare
SASL tokens below 1.0), 1.0 and Sarama's highest (2.2).

Below 0.10.2 Sarama has no admin client and no consumer groups, so at its default version
(Kafka 0.8.2: Metadata v0, Produce v0 and Fetch v0 in message format v0, ListOffsets v0,
FindCoordinator v0, OffsetCommit v1 without a member, OffsetFetch v1), at 0.9 and at 0.10.0
(Produce v2 and Fetch v2, format v1) the scenario is the one such applications ran: the
topic made beforehand, topics listed from Metadata, a partition consumer per partition
from the oldest offset and an offset manager committing what was read. What they stored
is read back with confluent-kafka, an independent client."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import sarama_scenario
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import topic_name

pytestmark = pytest.mark.django_db

SOURCE = Path(__file__).resolve().parents[1] / "clients" / "sarama"
RECORDS = 30


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    built = sarama_scenario(tmp_path_factory.mktemp("sarama"))
    if built is None:
        pytest.skip("needs Debian's golang-go and golang-github-shopify-sarama-dev")
    return built


def run_scenario(scenario: Path, kafka, version: str, name: str) -> dict[str, dict]:
    result = subprocess.run(
        [
            str(scenario),
            f"-broker={kafka.bootstrap}",
            f"-user={kafka.admin_a.key_id}",
            f"-password={kafka.admin_a.secret}",
            f"-version={version}",
            f"-topic={name}",
            f"-group={name}-group",
            f"-count={RECORDS}",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    steps = {}
    for line in result.stdout.splitlines():
        step = json.loads(line)
        steps.setdefault(step["step"], step)
    return steps


@pytest.mark.parametrize("version", ["max", "1.0.0", "0.11.0.0", "0.10.2.0"])
def test_sarama_creates_produces_lists_consumes_and_commits(scenario, kafka, version):
    steps = run_scenario(scenario, kafka, version, topic_name("sarama"))
    if version == "0.10.2.0":
        # DescribeConfigs came with Kafka 0.11: Sarama refuses to send it itself (its
        # ErrUnsupportedVersion, before any request), so it cannot list topics there.
        listed = steps.pop("list_topics")
        assert listed["error"] == "kafka server: The version of API is not supported."
    failed = {k: v.get("error") for k, v in steps.items() if not v["ok"]}
    assert not failed, failed
    assert steps["produce"]["value"] == RECORDS
    assert version == "0.10.2.0" or steps["list_topics"]["value"] is True
    assert steps["consume"]["value"] == RECORDS  # every record, once each counted
    # Committed offsets (the next offset to read) over the three partitions: all of them.
    assert steps["committed"]["value"] == RECORDS
    assert "consume_error" not in steps


@pytest.mark.parametrize("version", ["default", "0.9.0.0", "0.10.0.0"])
def test_sarama_without_consumer_groups_lists_produces_consumes_and_commits(
    scenario, kafka, version
):
    name = topic_name("sarama-old")
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])[name].result(30)
    steps = run_scenario(scenario, kafka, version, name)
    failed = {k: v.get("error") for k, v in steps.items() if not v["ok"]}
    assert not failed, failed
    if version == "default":
        assert steps["connect"]["value"] == "0.8.2.0"
    assert steps["list_topics"]["value"] is True  # Metadata v0, no topics named: all
    assert steps["produce"]["value"] == RECORDS
    assert steps["partitions"]["value"] == 3
    assert steps["consume"]["value"] == RECORDS
    assert steps["committed"]["value"] == RECORDS
    assert "consume_error" not in steps

    # What Sarama stored and committed, as another client sees it: every record once,
    # offsets from 0 in each partition, and the group's commits at each partition's end.
    consumer = Consumer(
        confluent_conf(
            kafka,
            kafka.admin_a,
            **{"group.id": f"{name}-group", "auto.offset.reset": "earliest"},
        )
    )
    try:
        parts = [TopicPartition(name, p) for p in range(3)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=30)}
        consumer.assign([TopicPartition(name, p, 0) for p in range(3)])
        values, offsets = [], {p: [] for p in range(3)}
        for _ in range(100):
            if len(values) >= RECORDS:
                break
            for msg in consumer.consume(RECORDS, timeout=1):
                assert msg.error() is None, msg.error()
                values.append(msg.value().decode())
                offsets[msg.partition()].append(msg.offset())
                assert msg.key() == msg.value()
    finally:
        consumer.close()
    assert sorted(values, key=int) == [str(i) for i in range(RECORDS)]
    for p, seen in offsets.items():
        assert seen == list(range(len(seen)))
        assert committed[p] == len(seen)
