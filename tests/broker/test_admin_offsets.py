"""Each client: alter retention.ms and read it back; list offsets (earliest, latest, by time)."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from tests.broker.conftest import confluent_conf, kafka_python_conf
from tests.broker.test_clients import confluent_create, topic_name

pytestmark = pytest.mark.django_db
T0 = 1_700_000_000_000


def seeded_topic(kafka, records=100):
    """A 1-partition topic whose record i has timestamp T0 + 1000*i."""
    from confluent_kafka import Producer

    name = topic_name("offsets")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"linger.ms": 0}))
    for i in range(records):
        producer.produce(name, value=str(i).encode(), timestamp=T0 + 1000 * i)
        producer.poll(0)
    assert producer.flush(20) == 0
    return name


def test_confluent_configs_and_offsets(kafka):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    name = seeded_topic(kafka)
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    resource = ConfigResource(
        "topic",
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(20)
    configs = next(iter(admin.describe_configs([ConfigResource("topic", name)]).values())).result(
        20
    )
    assert configs["retention.ms"].value == "86400000"
    assert configs["cleanup.policy"].value == "delete"
    consumer = Consumer(confluent_conf(kafka, kafka.admin_a, **{"group.id": "x"}))
    low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
    assert (low, high) == (0, 100)
    found = consumer.offsets_for_times([TopicPartition(name, 0, T0 + 41_500)], timeout=10)
    assert found[0].offset == 42
    late = consumer.offsets_for_times([TopicPartition(name, 0, T0 + 10**9)], timeout=10)
    assert late[0].offset in (-1, 100)  # past the last record: "none" / end
    consumer.close()
    # AdminClient.list_offsets: MAX_TIMESTAMP is the last record here (the largest
    # timestamp), and every answer carries the leader epoch the records were written in.
    from confluent_kafka.admin import OffsetSpec

    tp = TopicPartition(name, 0)
    answers = {
        spec: admin.list_offsets({tp: getattr(OffsetSpec, spec)()})[tp].result(20)
        for spec in ("earliest", "latest", "max_timestamp")
    }
    assert answers["earliest"].offset == 0 and answers["latest"].offset == 100
    top = answers["max_timestamp"]
    assert (top.offset, top.timestamp) == (99, T0 + 99_000)
    epochs = {a.leader_epoch for a in answers.values()}
    assert len(epochs) == 1 and epochs.pop() >= 0


def test_kafka_python_configs_and_offsets(kafka):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    name = seeded_topic(kafka)
    admin = KafkaAdminClient(**kafka_python_conf(kafka, kafka.admin_a))
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "3600000"})]
    )
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    retention = described["topic"][name]["retention.ms"]
    assert retention["value"] == "3600000"
    assert retention["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    admin.close()
    consumer = KafkaConsumer(**kafka_python_conf(kafka, kafka.admin_a))
    tp = TopicPartition(name, 0)
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == 100
    assert consumer.offsets_for_times({tp: T0 + 10_000})[tp].offset == 10
    consumer.close()


def test_aiokafka_configs_and_offsets(kafka):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    name = seeded_topic(kafka)
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": kafka.admin_a.key_id,
        "sasl_plain_password": kafka.admin_a.secret,
    }

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap, **sasl)
        await admin.start()
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "7200000"})]
        )
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        await admin.close()
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, **sasl)
        await consumer.start()
        tp = TopicPartition(name, 0)
        ends = await consumer.end_offsets([tp])
        starts = await consumer.beginning_offsets([tp])
        by_time = await consumer.offsets_for_times({tp: T0 + 55_000})
        await consumer.stop()
        return described, starts[tp], ends[tp], by_time[tp].offset

    described, start, end, at = asyncio.run(asyncio.wait_for(run(), 60))
    entries = described[0].to_object()["resources"][0]["config_entries"]
    values = {e["config_names"]: (e["config_value"], e["config_source"]) for e in entries}
    assert values["retention.ms"] == ("7200000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert values["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
    assert (start, end, at) == (0, 100, 55)


def test_kcat_queries_offsets_by_time(kafka):
    name = seeded_topic(kafka)
    auth = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanism=PLAIN",
        "-X",
        f"sasl.username={kafka.admin_a.key_id}",
        "-X",
        f"sasl.password={kafka.admin_a.secret}",
    ]
    out = subprocess.run(
        ["kcat", "-b", kafka.bootstrap, *auth, "-Q", "-t", f"{name}:0:{T0 + 20_000}"],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout.decode()
    assert "offset 20" in out, out
