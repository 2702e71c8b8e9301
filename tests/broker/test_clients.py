"""Real Kafka clients against a real broker process: SASL, produce/consume, admin, tenancy."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from tests.broker.conftest import confluent_conf, kafka_python_conf

# The broker reads the test database from its own process; the marker makes pytest-django
# create that database even when only this module runs.
pytestmark = pytest.mark.django_db

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 10_000  # keyed records per codec and client, as the issue asks


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def assert_stored_with(kafka, name: str, codec: str) -> None:
    """The batches the broker wrote for ``name``, read from its segment files, carry
    ``codec``: at least 90% of the records (a client may send a small batch that does
    not shrink uncompressed, as librdkafka does), and all of them for ``none``.

    Checks the effect, not the round trip: a client that silently falls back to no
    compression still round-trips its records."""
    from collections import Counter
    from pathlib import Path

    from control_plane.catalog.models import Topic
    from data_plane.records.batch import iter_batches

    topic = Topic.objects.get(name=name)
    records: Counter[str] = Counter()
    for segment in Path(kafka.data_dir).glob(f"{topic.topic_id}-*/*.log"):
        for h in iter_batches(segment.read_bytes()):
            records[h.compression.name.lower()] += h.records_count
    total = sum(records.values())
    assert total > 0, f"no batches stored for {name}"
    wanted = total if codec == "none" else 0.9 * total
    assert records[codec] >= wanted, f"asked for {codec}, stored {dict(records)}"


def confluent_create(kafka, key, name, partitions=3):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_conf(kafka, key))
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=20)
    return admin


def confluent_consume(
    kafka,
    key,
    name,
    partitions,
    expected,
    mechanism="SCRAM-SHA-256",
    *,
    timeout=30.0,
    expect_errors=False,
):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        confluent_conf(
            kafka,
            key,
            mechanism,
            **{"group.id": "unused", "enable.auto.commit": False, "auto.offset.reset": "earliest"},
        )
    )
    consumer.assign([TopicPartition(name, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None and not expect_errors:
            raise AssertionError(msg.error())
        if msg.error() is None:
            got.append(msg)
    consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip_every_codec(kafka, codec):
    from confluent_kafka import Producer

    name = topic_name()
    confluent_create(kafka, kafka.admin_a, name)
    producer = Producer(
        confluent_conf(
            kafka,
            kafka.admin_a,
            "SCRAM-SHA-512",
            **{"compression.type": codec, "linger.ms": 5, "enable.idempotence": True},
        )
    )
    for i in range(N):
        producer.produce(
            name,
            key=f"key-{i % 50}",
            value=json.dumps({"n": i}),
            headers=[("seq", str(i).encode())],
            timestamp=1_700_000_000_000 + i,
        )
    assert producer.flush(30) == 0
    got = confluent_consume(kafka, kafka.admin_a, name, 3, N)
    assert len(got) == N
    by_key: dict[bytes, list[int]] = {}
    for msg in got:
        n = json.loads(msg.value())["n"]
        assert msg.key() == f"key-{n % 50}".encode()
        assert msg.headers() == [("seq", str(n).encode())]
        assert msg.timestamp()[1] == 1_700_000_000_000 + n
        by_key.setdefault(msg.key(), []).append(n)
    assert all(v == sorted(v) for v in by_key.values())  # per-key (per-partition) order
    assert_stored_with(kafka, name, codec)


T0 = 1_700_000_000_000


def check_records(got: list[tuple[bytes, bytes, list, int]]) -> None:
    """Keys, values, headers and timestamps as produced, in order per key (partition)."""
    assert len(got) == N
    by_key: dict[bytes, list[int]] = {}
    for key, value, headers, timestamp in got:
        n = json.loads(value)["n"]
        assert key == f"key-{n % 50}".encode()
        assert [(k, bytes(v)) for k, v in headers] == [("seq", str(n).encode())]
        assert timestamp == T0 + n
        by_key.setdefault(key, []).append(n)
    assert sorted(n for ns in by_key.values() for n in ns) == list(range(N))
    assert all(v == sorted(v) for v in by_key.values())


def record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], int]:
    return (
        f"key-{i % 50}".encode(),
        json.dumps({"n": i}).encode(),
        [("seq", str(i).encode())],
        T0 + i,
    )


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip_every_codec(kafka, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    name = topic_name()
    admin = KafkaAdminClient(**kafka_python_conf(kafka, kafka.admin_a))
    admin.create_topics([NewTopic(name, 2, 1)])
    # The client default: an idempotent producer (InitProducerId, sequence checks).
    producer = KafkaProducer(
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        **kafka_python_conf(kafka, kafka.admin_a),
    )
    for i in range(N):
        key, value, headers, ts = record(i)
        producer.send(name, key=key, value=value, headers=headers, timestamp_ms=ts)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        auto_offset_reset="earliest",
        **kafka_python_conf(kafka, kafka.admin_a, "PLAIN"),
    )
    tps = [TopicPartition(name, 0), TopicPartition(name, 1)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    # Poll until every record is in (bounded): on a loaded machine a pause between two
    # fetches can outlast a fixed consumer_timeout_ms, which would end the read early.
    got = []
    deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend((m.key, m.value, m.headers, m.timestamp) for m in batch)
    check_records(got)
    assert sum(consumer.end_offsets(tps).values()) == N
    consumer.close()
    admin.close()
    assert_stored_with(kafka, name, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip_every_codec(kafka, codec):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    name = topic_name()
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": kafka.admin_a.key_id,
        "sasl_plain_password": kafka.admin_a.secret,
    }

    async def run():
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap,
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
            **sasl,
        )
        await producer.start()
        pending = []
        for i in range(N):
            key, value, headers, ts = record(i)
            pending.append(
                await producer.send(name, key=key, value=value, headers=headers, timestamp_ms=ts)
            )
        await asyncio.gather(*pending)
        await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest", **sasl
        )
        await consumer.start()
        tps = [TopicPartition(name, 0), TopicPartition(name, 1)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = []
        while len(got) < N:
            batch = await consumer.getmany(*tps, timeout_ms=2000)
            if not batch:
                break
            for messages in batch.values():
                got += [(m.key, m.value, list(m.headers), m.timestamp) for m in messages]
        await consumer.stop()
        return got

    check_records(asyncio.run(asyncio.wait_for(run(), 90)))
    assert_stored_with(kafka, name, codec)


# kcat is Debian's build on librdkafka 2.0.2, which sends the pre-2.6.1 doubled SCRAM
# client nonce; the broker accepts exactly that form (see data_plane/broker/sasl.py).
# kcat -P sets one header for every record and cannot set timestamps per record, so
# those are checked as a constant header and a broker-plausible CreateTime.
KCAT_MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]


@pytest.mark.parametrize(("codec", "mechanism"), list(zip(CODECS, KCAT_MECHANISMS, strict=True)))
def test_kcat_round_trip_every_codec(kafka, codec, mechanism):
    name = topic_name()
    confluent_create(kafka, kafka.admin_a, name, partitions=2)
    auth = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        f"sasl.mechanism={mechanism}",
        "-X",
        f"sasl.username={kafka.admin_a.key_id}",
        "-X",
        f"sasl.password={kafka.admin_a.secret}",
    ]
    lines = "".join(f"key-{i % 50}:{i}\n" for i in range(N))
    before = int(time.time() * 1000)
    subprocess.run(
        [
            "kcat",
            "-b",
            kafka.bootstrap,
            *auth,
            "-P",
            "-t",
            name,
            "-K:",
            "-z",
            codec,
            "-H",
            "src=kcat",
        ],
        input=lines.encode(),
        check=True,
        timeout=60,
    )
    after = int(time.time() * 1000)
    out = subprocess.run(
        [
            "kcat",
            "-b",
            kafka.bootstrap,
            *auth,
            "-C",
            "-t",
            name,
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k|%s|%h|%T|%p|%o\n",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    rows = [line.split("|") for line in out.splitlines()]
    assert len(rows) == N
    by_key: dict[str, list[int]] = {}
    for key, value, headers, ts, _partition, _offset in rows:
        assert key == f"key-{int(value) % 50}"
        assert headers == "src=kcat"
        assert before - 1000 <= int(ts) <= after + 1000
        by_key.setdefault(key, []).append(int(value))
    assert sorted(int(r[1]) for r in rows) == list(range(N))
    assert all(v == sorted(v) for v in by_key.values())
    offsets = subprocess.run(
        ["kcat", "-b", kafka.bootstrap, *auth, "-Q", "-t", f"{name}:0:-1", "-t", f"{name}:1:-1"],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout.decode()
    ends = [int(line.rsplit(" ", 1)[1]) for line in offsets.splitlines() if "offset" in line]
    assert sum(ends) == N
    # librdkafka 2.0.2 compresses only if the broker's lowest Produce version is 0.
    assert_stored_with(kafka, name, codec)


def test_wrong_secret_and_unknown_key_fail_authentication(kafka):
    from confluent_kafka.admin import AdminClient

    for conf in (
        confluent_conf(kafka, kafka.admin_a) | {"sasl.password": "wrong"},
        confluent_conf(kafka, kafka.admin_a, "PLAIN") | {"sasl.password": "wrong"},
        confluent_conf(kafka, kafka.admin_a) | {"sasl.username": "MRKNOSUCHKEY00000"},
    ):
        admin = AdminClient(conf)
        with pytest.raises(Exception) as info:
            admin.list_topics(timeout=5)
        assert (
            "Authentication" in str(info.value)
            or "_TRANSPORT" in str(info.value)
            or ("timed out" in str(info.value).lower())
        )


def test_tenants_see_only_their_own_topics(kafka):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    mine = topic_name("mine")
    confluent_create(kafka, kafka.admin_a, mine, partitions=1)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    producer.produce(mine, value=b"tenant A's secret")
    assert producer.flush(10) == 0
    other = AdminClient(confluent_conf(kafka, kafka.admin_b))
    assert mine not in other.list_topics(timeout=10).topics
    # Names are per tenant: B reading "mine" sees its own (empty or missing) topic, never A's.
    assert confluent_consume(kafka, kafka.admin_b, mine, 1, 1, timeout=5, expect_errors=True) == []


def test_missing_acl_is_topic_authorization_failed(kafka):
    from confluent_kafka import KafkaError, Producer

    name = topic_name("private")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    errors = []
    producer = Producer(confluent_conf(kafka, kafka.reader_a, **{"message.timeout.ms": 5000}))
    producer.produce(name, value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    )


def test_perf_tools_produce_and_consume(kafka):
    """`manage.py perf` runs against a SASL endpoint and reports JSON (no timing asserted)."""
    from bench import perf

    name = topic_name("perf")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    endpoint = perf.Endpoint(kafka.bootstrap, kafka.admin_a.key_id, kafka.admin_a.secret)
    produced = perf.produce(endpoint, name, records=5000, size=100, timeout=60)
    assert produced["records"] == 5000 and produced["errors"] == 0
    assert produced["undelivered"] == 0 and produced["p50_ms"] >= 0
    consumed = perf.consume(endpoint, name, records=5000, timeout=60)
    assert consumed["records"] == 5000 and consumed["record_bytes"] == 100


def test_perf_command_wraps_the_load_generator(kafka, capsys):
    """`manage.py perf` and `python -m bench.perf` take the same command line and print
    one JSON line each."""
    from django.core.management import call_command

    from bench import perf

    name = topic_name("perf")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    common = ["--bootstrap", kafka.bootstrap, "--topic", name, "--records", "200"]
    common += ["--username", kafka.admin_a.key_id, "--timeout", "60"]
    call_command("perf", "produce", *common, "--password", kafka.admin_a.secret)
    assert perf.main(["consume", *common, "--password", kafka.admin_a.secret]) == 0
    produced, consumed = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert produced["tool"] == "produce" and produced["records"] == 200
    assert produced["errors"] == 0 and produced["undelivered"] == 0
    assert consumed["tool"] == "consume" and consumed["records"] == 200
