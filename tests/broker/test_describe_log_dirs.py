"""DescribeLogDirs (key 35) against two real broker processes: partition sizes for
``ClusterClient.log_dirs`` and for kafka-python's admin client, scoped to the tenant.

The oracle for every size is the broker's own data directory: a partition's size is the
sum of its ``*.log`` segment files on that broker's disk.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench import perf
from control_plane.catalog.brokers import broker_client
from control_plane.catalog.models import Topic
from control_plane.tenancy.models import Tenant
from data_plane.client import ClusterClient, Connection, KafkaClientError
from data_plane.protocol.errors import ErrorCode as E
from tests.broker.conftest import _brokers, _key, confluent_conf, kafka_python_conf
from tests.broker.test_clients import topic_name

pytestmark = pytest.mark.django_db
DESCRIBE_LOG_DIRS = 35


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _brokers(django_db_blocker, tmp_path_factory, 2)


@pytest.fixture(scope="module")
def describer(cluster, django_db_blocker):
    """Tenant A's key with Describe on the cluster and on topics starting "seen-" only."""
    with django_db_blocker.unblock():
        tenant = Tenant.objects.get(slug=cluster[0].tenant_a)
        return _key(
            tenant,
            "describer",
            [
                ("cluster", "literal", "kafka-cluster", "describe"),
                ("topic", "prefixed", "seen-", "describe"),
            ],
        )


def create(env, key, name, partitions=2, replicas=2):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_conf(env, key))
    perf.create_topics(admin, [NewTopic(name, partitions, replicas)], timeout=20)


def produce(env, key, name, partition, count, size=200):
    from confluent_kafka import Producer

    producer = Producer(confluent_conf(env, key, **{"acks": "all", "linger.ms": 5}))
    errors = []
    for i in range(count):
        producer.produce(
            name,
            value=bytes([i % 251]) * size,
            partition=partition,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0 and not errors


def disk_size(env, topic_id, index):
    directory = Path(env.data_dir) / f"{topic_id}-{index}"
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def topic_id(name, tenant_slug):
    return Topic.objects.get(name=name, tenant__slug=tenant_slug).topic_id


def wait_replicated(cluster, name, tenant_slug, partitions=2, seconds=30):
    """Until every broker's copy of every partition has the same size on disk."""
    tid = topic_id(name, tenant_slug)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(len({disk_size(k, tid, i) for k in cluster}) == 1 for i in range(partitions)):
            return tid
        time.sleep(0.2)
    raise AssertionError(f"replicas of {name} differ after {seconds} s")


def client_for(env, key):
    return ClusterClient(
        [("127.0.0.1", env.port)],
        username=key.key_id,
        password=key.secret,
        mechanism="SCRAM-SHA-256",
    )


def raw(env, key, version, topics=None):
    conn = Connection("127.0.0.1", env.port)
    try:
        conn.authenticate("SCRAM-SHA-256", key.key_id, key.secret)
        return conn.request(DESCRIBE_LOG_DIRS, version, {"topics": topics})
    finally:
        conn.close()


def reported(answer):
    """{(topic, partition): size} of one broker's answer."""
    return {
        (t["name"], p["partition_index"]): p["partition_size"]
        for result in answer["results"]
        for t in result["topics"]
        for p in t["partitions"]
    }


def test_cluster_client_reports_leader_sizes_that_grow(cluster):
    env = cluster[0]
    name = topic_name("size")
    create(env, env.admin_a, name)
    produce(env, env.admin_a, name, 0, 50)
    tid = wait_replicated(cluster, name, env.tenant_a)
    with broker_client(Tenant.objects.get(slug=env.tenant_a)) as client:  # the console's way
        sizes = client.log_dirs([name])
        assert set(sizes) == {(name, 0), (name, 1)}
        assert sizes[(name, 0)] == disk_size(env, tid, 0) > 50 * 200
        assert sizes[(name, 1)] == 0  # held by both brokers, never written
        assert client.log_dirs(None)[(name, 0)] == sizes[(name, 0)]  # null: every topic
        assert client.log_dirs([]) == {}
        assert client.log_dirs(["no-such-" + name]) == {}

        produce(env, env.admin_a, name, 0, 20)
        produce(env, env.admin_a, name, 1, 5)
        wait_replicated(cluster, name, env.tenant_a)
        grown = client.log_dirs([name])
        assert grown[(name, 0)] == disk_size(env, tid, 0) > sizes[(name, 0)] + 20 * 200
        assert grown[(name, 1)] == disk_size(env, tid, 1) > 5 * 200


def test_every_version_answers_for_this_brokers_logs_only(cluster):
    name = topic_name("one")
    create(cluster[0], cluster[0].admin_a, name, partitions=2, replicas=1)
    produce(cluster[0], cluster[0].admin_a, name, 0, 10)
    produce(cluster[0], cluster[0].admin_a, name, 1, 10)
    tid = topic_id(name, cluster[0].tenant_a)
    holders = {}
    for env in cluster:
        for version in range(5):
            answer = raw(env, env.admin_a, version, [{"topic": name, "partitions": [0, 1, 7]}])
            assert answer.get("error_code", E.NONE) == E.NONE
            (result,) = answer["results"]
            assert result["error_code"] == E.NONE
            # Tenant-relative: a logical name, never the broker's path.
            assert result["log_dir"] == f"/millrace/{env.tenant_a}"
            assert str(env.data_dir) not in json.dumps(answer, default=str)
            mine = reported(answer)
            expected = {
                (name, i): disk_size(env, tid, i)
                for i in (0, 1)
                if (Path(env.data_dir) / f"{tid}-{i}").is_dir()
            }
            assert mine == expected, f"broker {env.broker_id} v{version}"
            for p in result["topics"][0]["partitions"] if result["topics"] else []:
                assert p["offset_lag"] == 0 and p["is_future_key"] is False
            if version >= 4:
                # The tenant's storage limit and what is left of it, not the disk's.
                limit = Tenant.objects.get(slug=env.tenant_a).max_storage_bytes
                assert result["total_bytes"] == limit
                # The tenant's logs here take some of it.
                assert 0 < result["usable_bytes"] < limit
            holders.update(dict.fromkeys(mine, env.broker_id))
    assert set(holders) == {(name, 0), (name, 1)}  # one replica each, somewhere


def test_kafka_python_admin_agrees_with_the_disk(cluster):
    from kafka.admin import KafkaAdminClient

    env = cluster[0]
    name = topic_name("kp")
    create(env, env.admin_a, name)
    produce(env, env.admin_a, name, 1, 30)
    tid = wait_replicated(cluster, name, env.tenant_a)
    admin = KafkaAdminClient(**kafka_python_conf(env, env.admin_a))
    try:
        answers = admin.describe_log_dirs()  # every broker, every topic
        only_one = admin.describe_log_dirs({name: [1]})
    finally:
        admin.close()
    by_broker = {a["broker"]: a["log_dirs"] for a in answers}
    assert set(by_broker) == {k.broker_id for k in cluster}
    for k in cluster:
        (log_dir,) = by_broker[k.broker_id]
        assert log_dir["error_code"] == 0 and log_dir["log_dir"] == f"/millrace/{k.tenant_a}"
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        sizes = {
            p["partition_index"]: p["partition_size"]
            for t in log_dir["topics"]
            if t["name"] == name
            for p in t["partitions"]
        }
        assert sizes == {0: 0, 1: disk_size(k, tid, 1)} and sizes[1] > 30 * 200
    for a in only_one:
        (log_dir,) = a["log_dirs"]
        assert [
            (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in log_dir["topics"]
        ] == [(name, [1])]


def test_a_tenant_sees_only_its_own_topics(cluster):
    env = cluster[0]
    name = topic_name("iso")
    create(env, env.admin_a, name)
    produce(env, env.admin_a, name, 0, 40)
    create(env, env.admin_b, name)  # the same name in tenant B: another topic
    produce(env, env.admin_b, name, 0, 3)
    a_id = wait_replicated(cluster, name, env.tenant_a)
    b_id = wait_replicated(cluster, name, env.tenant_b)
    with client_for(env, env.admin_b) as b:
        assert b.log_dirs([name])[(name, 0)] == disk_size(env, b_id, 0)
        assert disk_size(env, b_id, 0) < disk_size(env, a_id, 0)
        everything = b.log_dirs(None)
    a_topics = set(Topic.objects.filter(tenant__slug=env.tenant_a).values_list("name", flat=True))
    b_topics = set(Topic.objects.filter(tenant__slug=env.tenant_b).values_list("name", flat=True))
    assert {t for t, _ in everything} == b_topics
    for k in cluster:
        for asked in (None, [{"topic": t, "partitions": [0, 1]} for t in a_topics]):
            names = {t for t, _ in reported(raw(k, k.admin_b, 4, asked))}
            assert names <= b_topics and not (names & (a_topics - b_topics))


def test_describe_on_the_cluster_and_on_each_topic_is_required(cluster, describer):
    env = cluster[0]
    seen, hidden = topic_name("seen"), topic_name("hidden")
    for name in (seen, hidden):
        create(env, env.admin_a, name)
        produce(env, env.admin_a, name, 0, 5)
    # reader_a may read "shared-" topics but not describe the cluster.
    for version in range(5):
        answer = raw(env, env.reader_a, version)
        assert answer["results"] == []
        if version >= 3:
            assert answer["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    for topics in ([seen], None):
        with client_for(env, env.reader_a) as reader, pytest.raises(KafkaClientError) as refused:
            reader.log_dirs(topics)
        assert refused.value.code == E.CLUSTER_AUTHORIZATION_FAILED
    # The describer's ACLs reach the broker with the next metadata refresh.
    deadline = time.monotonic() + 20
    while True:
        with client_for(env, describer) as client:
            try:
                sizes = client.log_dirs(None)
            except KafkaClientError:
                sizes = {}
        if (seen, 0) in sizes or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert sizes[(seen, 0)] > 0 and all(t.startswith("seen-") for t, _ in sizes)
    asked = [{"topic": hidden, "partitions": [0, 1]}, {"topic": seen, "partitions": [0]}]
    for k in cluster:
        assert {t for t, _ in reported(raw(k, describer, 4, asked))} <= {seen}
