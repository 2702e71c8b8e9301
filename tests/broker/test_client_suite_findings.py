"""What librdkafka's own integration suite found, reproduced with confluent-kafka and raw
sockets: answers a client can act on instead of retrying until it times out."""

from __future__ import annotations

import pytest

from data_plane.protocol.errors import ErrorCode
from data_plane.records import Record, RecordBatch
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_consume, confluent_create, topic_name
from tests.broker.test_wire import RawClient, produce

pytestmark = pytest.mark.django_db

METADATA, DELETE_RECORDS = 3, 21


@pytest.mark.parametrize("name", ["bad$#!", "x" * 300, "..", "__internal"])
def test_metadata_auto_create_of_an_invalid_name_is_invalid_topic(kafka, name):
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    body = {
        "topics": [{"name": name}],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }
    [topic] = client.request(METADATA, 12, body)["topics"]
    assert topic["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    # A valid name in the same way is created (retriable until its leader is known).
    good = topic_name("auto")
    body["topics"] = [{"name": good}]
    [topic] = client.request(METADATA, 12, body)["topics"]
    assert topic["error_code"] in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    client.close()


def test_producer_to_an_invalid_topic_name_fails_instead_of_retrying(kafka):
    from confluent_kafka import KafkaError, Producer

    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"message.timeout.ms": 120_000}))
    errors = []
    producer.produce("bad$#!", b"v", on_delivery=lambda err, msg: errors.append(err))
    # Bounded well below message.timeout.ms: before the fix the record waited for a
    # leader (LEADER_NOT_AVAILABLE) until the message timeout.
    assert producer.flush(60) == 0
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]


def test_a_keyless_record_on_a_compacted_topic_is_refused(kafka):
    from confluent_kafka.admin import AdminClient, NewTopic

    name = topic_name("compact")
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    new = NewTopic(name, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([new])[name].result(20)
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    mixed = RecordBatch(
        base_offset=0,
        records=(Record(0, 1, b"k", b"keyed"), Record(1, 1, None, b"keyless")),
    ).encode()
    answer = produce(client, name, mixed)
    assert answer["error_code"] == ErrorCode.INVALID_RECORD
    assert [e["batch_index"] for e in answer["record_errors"]] == [1]
    assert "without a key" in answer["record_errors"][0]["batch_index_error_message"]
    # Nothing of the batch was stored, and the next good batch is.
    good = RecordBatch(base_offset=0, records=(Record(0, 1, b"k", b"ok"),)).encode()
    assert produce(client, name, good)["base_offset"] == 0
    client.close()
    values = [m.value() for m in confluent_consume(kafka, kafka.admin_a, name, 1, 1)]
    assert values == [b"ok"]


def test_a_keyless_record_from_confluent_kafka_on_a_compacted_topic_fails(kafka):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = topic_name("compact")
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": "compact"})])[name].result(
        20
    )
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    results = []
    producer.produce(name, value=b"no key", on_delivery=lambda err, msg: results.append(err))
    assert producer.flush(60) == 0
    # The whole batch is refused, as Kafka does; the producer goes on with the next one.
    producer.produce(
        name, key=b"k", value=b"keyed", on_delivery=lambda err, msg: results.append(err)
    )
    assert producer.flush(60) == 0
    assert results[0] is not None and results[0].code() == KafkaError.INVALID_RECORD
    assert results[1] is None


@pytest.mark.parametrize(
    ("offset", "code"),
    [
        (-2, ErrorCode.OFFSET_OUT_OF_RANGE),
        (-7, ErrorCode.OFFSET_OUT_OF_RANGE),
        (-1, ErrorCode.NONE),
    ],
)
def test_delete_records_only_minus_one_means_the_high_watermark(kafka, offset, code):
    name = topic_name("trim")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    client = RawClient(kafka)
    client.login(kafka.admin_a)
    batch = RecordBatch(base_offset=0, records=tuple(Record(i, 1, b"k", b"v") for i in range(5)))
    assert produce(client, name, batch.encode())["error_code"] == ErrorCode.NONE
    body = {
        "topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": offset}]}],
        "timeout_ms": 5000,
    }
    [part] = client.request(DELETE_RECORDS, 2, body)["topics"][0]["partitions"]
    assert part["error_code"] == code
    client.close()
    left = confluent_consume(kafka, kafka.admin_a, name, 1, 5, timeout=3)
    assert len(left) == (0 if code == ErrorCode.NONE else 5)


def test_auto_created_topics_take_the_tenants_num_partitions(kafka, django_db_blocker):
    import time

    from control_plane.catalog.models import Topic
    from tests.broker.test_lifecycle import committed, set_tenant_limits

    def auto_create(name):
        client = RawClient(kafka)
        client.login(kafka.admin_b)
        body = {
            "topics": [{"name": name}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        }
        client.request(METADATA, 12, body)
        client.close()
        return committed(django_db_blocker, lambda: Topic.objects.get(name=name).partitions.count())

    def set_default(value):
        committed(
            django_db_blocker,
            lambda: set_tenant_limits(kafka.tenant_b, default_partitions=value),
        )
        time.sleep(1.5)  # the new setting reaches the broker's snapshot

    # The deployment's default (MILLRACE_DEFAULT_PARTITIONS, 1 unless set).
    assert auto_create(topic_name("auto")) == 1
    set_default(3)
    try:
        assert auto_create(topic_name("auto")) == 3
    finally:
        set_default(None)
    assert auto_create(topic_name("auto")) == 1


def test_authorized_operations_are_answered_when_asked(kafka):
    """KIP-430, with confluent-kafka's admin client: the operations the caller's ACLs allow,
    for a topic, the cluster and a group."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    name = f"shared-{topic_name('ops')}"
    confluent_create(kafka, kafka.admin_a, name, partitions=1)
    group = f"g-{name}"
    from tests.broker.test_groups import consumer, wait_assigned

    member = consumer(kafka, group)
    member.subscribe([name])
    wait_assigned([member], [1])

    def ops(key):
        admin = AdminClient(confluent_conf(kafka, key))
        topics = admin.describe_topics(TopicCollection([name]), include_authorized_operations=True)
        cluster = admin.describe_cluster(include_authorized_operations=True)
        groups = admin.describe_consumer_groups([group], include_authorized_operations=True)
        return (
            set(topics[name].result(20).authorized_operations or []),
            set(cluster.result(20).authorized_operations or []),
            set(groups[group].result(20).authorized_operations or []),
        )

    topic_ops, cluster_ops, group_ops = ops(kafka.admin_a)  # ALL on everything
    assert {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE} <= topic_ops
    assert {AclOperation.CREATE, AclOperation.DESCRIBE} <= cluster_ops
    assert {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE} <= group_ops
    reader_topic_ops, _, _ = ops_without_cluster(kafka, name)
    assert AclOperation.READ in reader_topic_ops and AclOperation.WRITE not in reader_topic_ops
    member.close()
    # Not asked: nothing is reported.
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    plain = admin.describe_topics(TopicCollection([name]))[name].result(20)
    assert not plain.authorized_operations


def ops_without_cluster(kafka, name):
    """The read-only key's view of a topic (it may not describe the cluster or groups)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(confluent_conf(kafka, kafka.reader_a))
    topics = admin.describe_topics(TopicCollection([name]), include_authorized_operations=True)
    return set(topics[name].result(20).authorized_operations or []), None, None


def test_a_topics_compression_type_is_what_is_stored(kafka):
    """compression.type=zstd: an lz4 producer's batches are stored as zstd (read from the
    segment files) and consumers read the same records."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.broker.test_clients import assert_stored_with

    name = topic_name("zstd")
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    admin.create_topics([NewTopic(name, 1, 1, config={"compression.type": "zstd"})])[name].result(
        20
    )
    producer = Producer(
        confluent_conf(kafka, kafka.admin_a, **{"compression.type": "lz4", "linger.ms": 5})
    )
    for i in range(2000):
        producer.produce(name, key=b"k%d" % (i % 10), value=b"value %d " % i * 10)
    assert producer.flush(30) == 0
    assert_stored_with(kafka, name, "zstd")
    got = confluent_consume(kafka, kafka.admin_a, name, 1, 2000)
    assert [m.value() for m in got] == [b"value %d " % i * 10 for i in range(2000)]


def test_records_outside_the_topics_timestamp_bounds_are_invalid_timestamp(kafka):
    import time

    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = topic_name("ts")
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    configs = {"message.timestamp.before.max.ms": "3600000"}
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(20)
    producer = Producer(confluent_conf(kafka, kafka.admin_a))
    results = []
    day_ago = int(time.time() * 1000) - 86_400_000
    producer.produce(name, b"old", timestamp=day_ago, on_delivery=lambda e, m: results.append(e))
    assert producer.flush(30) == 0
    producer.produce(name, b"new", on_delivery=lambda e, m: results.append(e))
    assert producer.flush(30) == 0
    assert results[0] is not None and results[0].code() == KafkaError.INVALID_TIMESTAMP
    assert results[1] is None
    assert [m.value() for m in confluent_consume(kafka, kafka.admin_a, name, 1, 1)] == [b"new"]


def test_tenants_get_a_clear_answer_for_manual_replica_assignments(kafka):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    name = topic_name("placed")
    placed = NewTopic(name, num_partitions=2, replica_assignment=[[1], [1]])
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([placed])[name].result(20)
    error = refused.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION
    assert "replica placement is managed by Millrace" in error.str()
    confluent_create(kafka, kafka.admin_a, name, partitions=1)  # nothing was left behind
    grow = NewPartitions(name, 2, replica_assignment=[[1]])
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([grow])[name].result(20)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
