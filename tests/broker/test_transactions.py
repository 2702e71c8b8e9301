"""Transactions end to end (Step 13): confluent-kafka's transactional producer against three
broker processes, topics replicated three ways, so that most markers are written by
another broker than the coordinator (WriteTxnMarkers). Read back with read_committed and
read_uncommitted consumers, and what the brokers stored checked for control batches."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.broker.conftest import _brokers, confluent_conf
from tests.broker.test_clients import topic_name


@pytest.fixture(scope="module")
def trio(django_db_setup, django_db_blocker, tmp_path_factory):
    extra = {"MILLRACE_TRANSACTION_ABORT_CHECK_INTERVAL_MS": "500"}
    yield from _brokers(django_db_blocker, tmp_path_factory, 3, extra_env=extra)


def _create(env, *names: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_conf(env, env.admin_a))
    futures = admin.create_topics([NewTopic(n, partitions, 3) for n in names])
    for f in futures.values():
        f.result(30)
    # Every broker knows the topics before a client asks one of them.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10)
        if all(n in meta.topics and len(meta.topics[n].partitions) == partitions for n in names):
            return
        time.sleep(0.2)


def _producer(env, transactional_id: str, key=None, **extra):
    from confluent_kafka import Producer

    conf = confluent_conf(env, key or env.admin_a, **{"transactional.id": transactional_id})
    return Producer({**conf, "linger.ms": 5, **extra})


def _read(env, topics: list[str], isolation: str, expected: int, timeout: float = 30.0):
    """(topic, partition, value) of every record a fresh consumer reads at ``isolation``,
    reading until ``expected`` arrived and then a little longer (nothing more may come)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        confluent_conf(
            env,
            env.admin_a,
            **{
                "group.id": f"read-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": isolation,
            },
        )
    )
    consumer.subscribe(topics)
    got = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.topic(), msg.partition(), msg.value().decode()))
            if len(got) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.5
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return got


def _by_partition(records):
    out: dict[tuple[str, int], list[str]] = {}
    for topic, partition, value in records:
        out.setdefault((topic, partition), []).append(value)
    return out


def test_committed_records_reach_read_committed_and_aborted_ones_never(trio):
    env = trio[0]
    orders, audit = topic_name("tx-orders"), topic_name("tx-audit")
    _create(env, orders, audit)
    producer = _producer(env, f"tx-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(30)

    def batch(tag: str, count: int) -> list[tuple[str, int, str]]:
        sent = []
        for i in range(count):
            topic, partition = (orders, audit)[i % 2], i % 3
            producer.produce(topic, f"{tag}-{i}".encode(), partition=partition)
            sent.append((topic, partition, f"{tag}-{i}"))
        return sent

    producer.begin_transaction()
    first = batch("c1", 30)
    producer.commit_transaction(30)
    producer.begin_transaction()
    aborted = batch("a1", 30)
    producer.flush(30)  # the aborted records are in the logs, not only in the client
    producer.abort_transaction(30)
    producer.begin_transaction()
    second = batch("c2", 30)
    producer.commit_transaction(30)

    committed = _read(env, [orders, audit], "read_committed", 60)
    assert _by_partition(committed) == _by_partition(first + second)
    everything = _read(env, [orders, audit], "read_uncommitted", 90)
    assert _by_partition(everything) == _by_partition(first + aborted + second)


def test_offsets_sent_to_a_transaction_are_the_groups_only_once_it_commits(trio):
    """Consume-transform-produce: the input offsets go into the transaction; an aborted
    one leaves the group's offsets where they were, a committed one moves them."""
    from confluent_kafka import Consumer, TopicPartition

    env = trio[1]
    source, sink = topic_name("tx-in"), topic_name("tx-out")
    _create(env, source, sink, partitions=1)
    seed = _producer(env, f"seed-{uuid.uuid4().hex[:8]}")
    seed.init_transactions(30)
    seed.begin_transaction()
    for i in range(20):
        seed.produce(source, f"in-{i}".encode(), partition=0)
    seed.commit_transaction(30)

    group = f"ctp-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        confluent_conf(
            env,
            env.admin_a,
            **{
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    consumer.assign([TopicPartition(source, 0)])
    producer = _producer(env, f"ctp-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(30)

    def transform(count: int, commit: bool) -> None:
        producer.begin_transaction()
        taken = 0
        deadline = time.monotonic() + 30
        while taken < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            producer.produce(sink, msg.value().upper(), partition=0)
            taken += 1
        assert taken == count
        position = consumer.position([TopicPartition(source, 0)])
        producer.send_offsets_to_transaction(position, consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def committed_offset() -> int:
        [tp] = consumer.committed([TopicPartition(source, 0)], timeout=20)
        return tp.offset

    transform(10, commit=True)
    assert committed_offset() == 10
    transform(5, commit=False)  # the group's offset stays
    assert committed_offset() == 10
    consumer.seek(TopicPartition(source, 0, 10))  # a restarted consumer resumes here
    transform(10, commit=True)
    assert committed_offset() == 20
    consumer.close()
    out = _read(env, [sink], "read_committed", 20)
    assert [v for _, _, v in out] == [f"IN-{i}" for i in range(20)]


def test_a_zombie_is_fenced_by_a_new_instance_and_cannot_commit(trio):
    from confluent_kafka import KafkaException

    env = trio[2]
    name = topic_name("tx-zombie")
    _create(env, name, partitions=1)
    transactional_id = f"zombie-{uuid.uuid4().hex[:8]}"
    zombie = _producer(env, transactional_id)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(name, b"zombie", partition=0)
    zombie.flush(30)

    successor = _producer(env, transactional_id)
    successor.init_transactions(60)  # aborts the zombie's transaction, fences it
    successor.begin_transaction()
    successor.produce(name, b"successor", partition=0)
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as failure:
        zombie.produce(name, b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    error = failure.value.args[0]
    assert error.fatal(), error  # fenced: the zombie can do nothing more
    assert [v for _, _, v in _read(env, [name], "read_committed", 1)] == ["successor"]
    # The zombie's record is in the log, aborted.
    everything = [v for _, _, v in _read(env, [name], "read_uncommitted", 2)]
    assert everything == ["zombie", "successor"]


def test_a_key_without_write_on_the_transactional_id_is_refused_at_once(trio):
    from confluent_kafka import KafkaException

    env = trio[0]
    producer = _producer(env, "not-mine", key=env.reader_a)
    with pytest.raises(KafkaException) as failure:
        producer.init_transactions(60)
    error = failure.value.args[0]
    # The authorization error itself (fatal), not a timeout after retrying the lookup.
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in error.name(), error
    assert error.fatal() or not error.retriable(), error


@pytest.fixture(scope="module")
def preset_keys(trio, django_db_blocker):
    """Keys of service accounts made with the console's and API's ACL presets, for names
    starting "eo-": exactly-once, transactional-producer and (no transactions) producer."""
    from control_plane.access import presets
    from control_plane.access import services as access_services
    from control_plane.tenancy.models import Tenant
    from tests.broker.conftest import Key
    from tests.conftest import SYSTEM

    keys = {}
    with django_db_blocker.unblock():
        tenant = Tenant.objects.get(slug=trio[0].tenant_a)
        for name in ("exactly-once", "transactional-producer", "producer"):
            preset = presets.parse(
                {
                    "preset": name,
                    "topic": "eo-",
                    "topic_pattern": "prefixed",
                    "group": "eo-",
                    "transactional_id": "eo-",
                }
            )
            sa, _ = presets.create_with_preset(
                SYSTEM, tenant, name=f"{name}-{uuid.uuid4().hex[:6]}", description="", preset=preset
            )
            made = access_services.create_api_key(SYSTEM, sa)
            keys[name] = Key(made.api_key.key_id, made.secret, sa.principal)
    return keys


def test_the_exactly_once_preset_runs_consume_transform_produce(trio, preset_keys):
    """The effect of the presets with a real client: an exactly-once key reads in a group
    and commits output and offsets in a transaction; a transactional-producer key may use
    only its transactional ids; a producer key may not use transactions at all."""
    from confluent_kafka import Consumer, KafkaException

    env = trio[2]
    tag = uuid.uuid4().hex[:6]
    source, sink = f"eo-in-{tag}", f"eo-out-{tag}"
    _create(env, source, sink, partitions=1)
    seed = _producer(env, f"seed-{tag}")
    seed.init_transactions(30)
    seed.begin_transaction()
    for i in range(5):
        seed.produce(source, f"in-{i}".encode(), partition=0)
    seed.commit_transaction(30)

    key = preset_keys["exactly-once"]
    consumer = Consumer(
        confluent_conf(
            env,
            key,
            **{
                "group.id": f"eo-{tag}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    consumer.subscribe([source])
    producer = _producer(env, f"eo-tx-{tag}", key=key)
    producer.init_transactions(60)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == 5
    producer.begin_transaction()
    for msg in got:
        producer.produce(sink, msg.value().upper(), partition=0)
    producer.send_offsets_to_transaction(
        consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)
    consumer.close()
    out = _read(env, [sink], "read_committed", 5)
    assert [v for _, _, v in out] == [f"IN-{i}" for i in range(5)]

    allowed = _producer(env, f"eo-{tag}", key=preset_keys["transactional-producer"])
    allowed.init_transactions(60)  # its transactional ids
    for name, transactional_id in (
        ("transactional-producer", f"other-{tag}"),  # not one of its ids
        ("producer", f"eo-{tag}-p"),  # no transactions at all
    ):
        with pytest.raises(KafkaException) as refused:
            _producer(env, transactional_id, key=preset_keys[name]).init_transactions(60)
        assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in refused.value.args[0].name()


def _expected(tag: str, topics: tuple[str, str], count: int = 12) -> list[tuple[str, int, str]]:
    return [(topics[i % 2], i % 3, f"{tag}-{i}") for i in range(count)]


def test_kafka_python_transactions_and_read_committed_consumer(trio):
    """The same guarantees with kafka-python's transactional producer, read back by
    kafka-python's own consumer at read_committed as well as by confluent-kafka's."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from tests.broker.conftest import kafka_python_conf

    env = trio[1]
    topics = (topic_name("kp-tx-a"), topic_name("kp-tx-b"))
    _create(env, *topics)
    producer = KafkaProducer(
        transactional_id=f"kp-{uuid.uuid4().hex[:8]}", **kafka_python_conf(env, env.admin_a)
    )
    producer.init_transactions()
    for tag, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for topic, partition, value in _expected(tag, topics):
            producer.send(topic, value.encode(), partition=partition)
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()
    committed = _expected("c1", topics) + _expected("c2", topics)
    assert _by_partition(_read(env, list(topics), "read_committed", 24)) == (
        _by_partition(committed)
    )
    consumer = KafkaConsumer(
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **kafka_python_conf(env, env.admin_a),
    )
    consumer.assign([TopicPartition(t, p) for t in topics for p in range(3)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 24 and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            got += [(tp.topic, tp.partition, r.value.decode()) for r in records]
    extra = consumer.poll(timeout_ms=1000)
    consumer.close()
    assert not extra
    assert _by_partition(got) == _by_partition(committed)


def test_aiokafka_transactions_with_offsets(trio):
    """aiokafka's transactional producer: a consume-transform-produce step with its
    offsets, one committed and one aborted, checked with confluent-kafka."""
    import asyncio

    from aiokafka import AIOKafkaProducer, TopicPartition
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    env = trio[2]
    source, sink = topic_name("aio-in"), topic_name("aio-out")
    _create(env, source, sink, partitions=1)
    group = f"aio-{uuid.uuid4().hex[:8]}"
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": env.admin_a.key_id,
        "sasl_plain_password": env.admin_a.secret,
    }

    async def run():
        producer = AIOKafkaProducer(
            bootstrap_servers=env.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}", **sasl
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send(sink, f"ok-{i}".encode(), partition=0)
                await producer.send_offsets_to_transaction({TopicPartition(source, 0): 5}, group)
            await producer.begin_transaction()
            await producer.send(sink, b"dropped", partition=0)
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): 9}, group)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    consumer = Consumer(confluent_conf(env, env.admin_a, **{"group.id": group}))
    [tp] = consumer.committed([CTopicPartition(source, 0)], timeout=20)
    consumer.close()
    assert tp.offset == 5
    assert [v for _, _, v in _read(env, [sink], "read_committed", 5)] == [
        f"ok-{i}" for i in range(5)
    ]
    assert len(_read(env, [sink], "read_uncommitted", 6)) == 6


def test_a_transaction_left_open_past_its_timeout_is_aborted(trio):
    """A producer that stops in the middle of a transaction holds read_committed readers
    at its first record only until its transaction.timeout.ms: its coordinator then
    fences and aborts it, and the readers move on."""
    from confluent_kafka import KafkaException, Producer

    env = trio[0]
    name = topic_name("tx-timeout")
    _create(env, name, partitions=1)
    stuck = _producer(env, f"stuck-{uuid.uuid4().hex[:8]}", **{"transaction.timeout.ms": 2000})
    stuck.init_transactions(30)
    stuck.begin_transaction()
    stuck.produce(name, b"never-committed", partition=0)
    stuck.flush(30)
    plain = Producer(confluent_conf(env, env.admin_a))
    plain.produce(name, b"after", partition=0)
    assert plain.flush(30) == 0
    # Held back while the transaction is open, then readable once it is aborted.
    assert [v for _, _, v in _read(env, [name], "read_committed", 1, timeout=30)] == ["after"]
    with pytest.raises(KafkaException):
        stuck.commit_transaction(30)


# --- transactions V2 (KIP-890 part 2), as Kafka 4's Java client speaks it ------------------


def _raw(env, broker_id: int):
    """A connection to one broker, signed in with tenant A's admin key."""
    from data_plane.client.connection import Connection

    target = next(e for e in env if e.broker_id == broker_id)
    conn = Connection("127.0.0.1", target.port, client_id="tv2-test", timeout=30.0)
    conn.authenticate("SCRAM-SHA-256", target.admin_a.key_id, target.admin_a.secret)
    return conn


def _tv2_produce(conn, topic: str, partition: int, tid: str, pid: int, epoch: int, seq: int, tag):
    from data_plane.protocol.messages import produce
    from data_plane.records import Record, RecordBatch

    batch = RecordBatch(
        base_offset=0,
        records=tuple(
            Record(i, int(time.time() * 1000), None, f"{tag}-{i}".encode()) for i in range(3)
        ),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    ).encode()
    body = {
        "transactional_id": tid,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }
    answer = conn.request(produce.KEY, 12, body)
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def test_transactions_v2_without_add_requests(trio):
    """What Kafka 4's Java client does once the brokers finalize transaction.version 2:
    Produce v12 with no AddPartitionsToTxn (each leader adds its partition, most of them
    on another broker than the coordinator), TxnOffsetCommit v5 with no AddOffsetsToTxn
    (the group coordinator adds the group), EndTxn v5 answering the bumped epoch, and the
    next transaction at that epoch from sequence 0. Checked with confluent-kafka's
    read_committed and read_uncommitted consumers and the group's committed offsets."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from data_plane.protocol.errors import ErrorCode as E
    from data_plane.protocol.messages import (
        api_versions,
        end_txn,
        find_coordinator,
        init_producer_id,
        txn_offset_commit,
    )

    env = trio[0]
    tag = uuid.uuid4().hex[:6]
    out, source, group, tid = f"tv2-out-{tag}", f"tv2-in-{tag}", f"tv2-g-{tag}", f"tv2-{tag}"
    _create(env, out)
    _create(env, source, partitions=1)
    admin = AdminClient(confluent_conf(env, env.admin_a))

    def current_leaders() -> dict[int, int]:
        found = admin.list_topics(out, timeout=10).topics[out].partitions
        return {p: m.leader for p, m in found.items()}

    leaders = current_leaders()

    first = _raw(trio, 1)
    # The feature, as Kafka 4 advertises it (supported from ApiVersions v4, KAFKA-17011).
    v4 = first.request(
        api_versions.KEY, 4, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert v4["supported_features"] == [
        {"name": "transaction.version", "min_version": 0, "max_version": 2}
    ]
    assert v4["finalized_features"] == [
        {"name": "transaction.version", "max_version_level": 2, "min_version_level": 2}
    ]
    assert v4["finalized_features_epoch"] > 0
    v3 = first.request(
        api_versions.KEY, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert not v3.get("supported_features") and v3["finalized_features"]

    def coordinator(key: str, key_type: int) -> int:
        found = first.request(find_coordinator.KEY, 3, {"key": key, "key_type": key_type})
        assert found["error_code"] == E.NONE, found
        return found["node_id"]

    txn_node = coordinator(tid, 1)
    assert set(leaders.values()) - {txn_node}, "some partition led by another broker"
    txn_conn = _raw(trio, txn_node)
    # AddPartitionsToTxn v4+ is between brokers only (Kafka: ClusterAction).
    from data_plane.protocol.messages import add_partitions_to_txn

    refused = txn_conn.request(
        add_partitions_to_txn.KEY,
        5,
        {
            "transactions": [
                {
                    "transactional_id": tid,
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "verify_only": False,
                    "topics": [{"name": out, "partitions": [0]}],
                }
            ]
        },
    )
    assert refused["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    group_conn = _raw(trio, coordinator(group, 0))
    init = txn_conn.request(
        init_producer_id.KEY,
        4,
        {
            "transactional_id": tid,
            "transaction_timeout_ms": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert init["error_code"] == E.NONE, init
    pid, epoch = init["producer_id"], init["producer_epoch"]
    conns = {e.broker_id: _raw(trio, e.broker_id) for e in trio}

    def produce(p: int, at_epoch: int, seq: int, what: str) -> int:
        """As a client does: a retriable answer (a leader moved meanwhile, as the
        controller balances new topics) is sent again to the partition's leader."""
        deadline = time.monotonic() + 30
        while True:
            leader = current_leaders()[p]
            code = _tv2_produce(conns[leader], out, p, tid, pid, at_epoch, seq, what)
            retriable = (E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, E.REQUEST_TIMED_OUT)
            if code not in retriable or time.monotonic() > deadline:
                return code
            time.sleep(0.2)

    def offsets(committed: int, at_epoch: int) -> int:
        answer = group_conn.request(
            txn_offset_commit.KEY,
            5,
            {
                "transactional_id": tid,
                "group_id": group,
                "producer_id": pid,
                "producer_epoch": at_epoch,
                "generation_id": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": source,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": committed,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
        return answer["topics"][0]["partitions"][0]["error_code"]

    def end(at_epoch: int, commit: bool) -> tuple[int, int, int]:
        body = {
            "transactional_id": tid,
            "producer_id": pid,
            "producer_epoch": at_epoch,
            "committed": commit,
        }
        answer = txn_conn.request(end_txn.KEY, 5, body)
        return answer["error_code"], answer["producer_id"], answer["producer_epoch"]

    # The first transaction: three partitions, offsets, commit.
    for p in leaders:
        assert produce(p, epoch, 0, f"c{p}") == E.NONE
    assert offsets(5, epoch) == E.NONE
    assert end(epoch, True) == (E.NONE, pid, epoch + 1)

    # The next one at the bumped epoch from sequence 0; the old epoch is fenced.
    bumped = epoch + 1
    for p in leaders:
        assert produce(p, epoch, 3, f"z{p}") == E.INVALID_PRODUCER_EPOCH, p
        assert produce(p, bumped, 0, f"a{p}") == E.NONE
    assert offsets(9, bumped) == E.NONE
    assert end(bumped, False) == (E.NONE, pid, bumped + 1)
    # A retry of that abort at its epoch is answered as the first was.
    deadline = time.monotonic() + 10
    while (again := end(bumped, False))[0] == E.CONCURRENT_TRANSACTIONS:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert again == (E.NONE, pid, bumped + 1)

    committed = _read(env, [out], "read_committed", 9)
    assert sorted(v for _, _, v in committed) == sorted(
        f"c{p}-{i}" for p in leaders for i in range(3)
    )
    everything = _read(env, [out], "read_uncommitted", 18)
    assert sorted(v for _, _, v in everything) == sorted(
        f"{t}{p}-{i}" for t in "ca" for p in leaders for i in range(3)
    )
    reader = Consumer(confluent_conf(env, env.admin_a, **{"group.id": group}))
    [mark] = reader.committed([TopicPartition(source, 0)], timeout=30)
    reader.close()
    assert mark.offset == 5  # the aborted transaction's offsets were dropped
    for conn in (first, txn_conn, group_conn, *conns.values()):
        conn.close()


# --- one broker of its own (after every test of the three: it registers as broker 1 too) --


@pytest.fixture(scope="module")
def solo(django_db_setup, django_db_blocker, tmp_path_factory):
    """One broker of its own: the recovery test kills it."""
    extra = {"MILLRACE_TRANSACTION_ABORT_CHECK_INTERVAL_MS": "500"}
    for envs in _brokers(django_db_blocker, tmp_path_factory, 1, extra_env=extra):
        yield envs[0]


def test_a_broker_killed_inside_a_transaction_recovers_it_and_aborts_it(solo):
    """kill -9 after a transaction's records and before its marker: the restarted broker
    rebuilds the open transaction from its log (read_committed readers wait at its first
    record), its coordinator takes the transaction over and aborts it at its timeout,
    and after another restart the abort is still indexed (its record stays hidden)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.broker.conftest import start_broker, stop_broker

    env = solo
    name = topic_name("tx-crash")

    admin = AdminClient(confluent_conf(env, env.admin_a))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    done = _producer(env, f"done-{uuid.uuid4().hex[:8]}")
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(name, b"committed", partition=0)
    done.commit_transaction(30)
    cut = _producer(env, f"cut-{uuid.uuid4().hex[:8]}", **{"transaction.timeout.ms": 4000})
    cut.init_transactions(30)
    cut.begin_transaction()
    cut.produce(name, b"in-flight", partition=0)
    cut.flush(30)  # in the log; no marker yet

    stop_broker(env, "kill")
    start_broker(env)
    plain = Producer(confluent_conf(env, env.admin_a))
    plain.produce(name, b"after", partition=0)
    assert plain.flush(30) == 0
    # The open transaction holds "after" back until its coordinator aborts it.
    got = [v for _, _, v in _read(env, [name], "read_committed", 2, timeout=40)]
    assert got == ["committed", "after"]

    stop_broker(env)
    start_broker(env)
    assert [v for _, _, v in _read(env, [name], "read_committed", 2)] == ["committed", "after"]
    everything = [v for _, _, v in _read(env, [name], "read_uncommitted", 3)]
    assert everything == ["committed", "in-flight", "after"]
