"""Operators place replicas by hand over the Kafka protocol (CreateTopics/CreatePartitions
with replica assignments), as ``manage.py operator_credentials`` lets them; tenants cannot.

Two real broker processes; confluent-kafka and kafka-python as clients. The oracle for
placement is the metadata the controller stores (the Partition rows) and what Metadata
answers to a tenant's own key.
"""

from __future__ import annotations

import io
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from psycopg import connect

from control_plane.audit.models import AuditEvent
from control_plane.catalog.models import Partition, Topic
from tests.broker.conftest import _brokers, confluent_conf, kafka_python_conf
from tests.broker.test_clients import topic_name

pytestmark = pytest.mark.django_db


USERS = {"ops": True, "ops-b": True, "leaving": True, "not-staff": False}


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    # Committed, outside any test's transaction: the broker processes look these users up.
    with django_db_blocker.unblock():
        for username, staff in USERS.items():
            get_user_model().objects.update_or_create(
                username=username, defaults={"is_staff": staff, "is_active": True}
            )
    try:
        yield from _brokers(django_db_blocker, tmp_path_factory, 2)
    finally:
        with django_db_blocker.unblock():
            get_user_model().objects.filter(username__in=USERS).delete()


def operator_settings(tenant: str, username: str = "ops") -> dict:
    """What ``manage.py operator_credentials`` prints for a staff user, parsed."""
    out = io.StringIO()
    call_command("operator_credentials", username, tenant, stdout=out)
    lines = [line for line in out.getvalue().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def pg_params() -> dict:
    params = connection.get_connection_params()
    return {k: v for k, v in params.items() if k in {"dbname", "user", "host", "port", "password"}}


def admin_for(env, conf: dict, *, warm: bool = True):
    """An admin client; ``warm``: once it has its first metadata, so that librdkafka's
    swap of the bootstrap handle for the broker's (which fails requests in flight with
    _DESTROY_BROKER) is behind it before a test's request."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": env.bootstrap, **conf})
    if warm:
        admin.list_topics(timeout=20)
    return admin


def stored_replicas(tenant: str, name: str) -> list[list[int]]:
    rows = Partition.objects.filter(topic__tenant__slug=tenant, topic__name=name)
    return [list(r.replicas) for r in rows.order_by("index")]


def test_an_operator_creates_a_topic_and_partitions_where_it_says(cluster, django_db_blocker):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import NewPartitions, NewTopic

    env = cluster[0]
    with django_db_blocker.unblock():
        conf = operator_settings(env.tenant_a)
    admin = admin_for(env, conf)
    name = topic_name("placed")
    placed = NewTopic(name, 3, replica_assignment=[[2, 1], [1, 2], [2, 1]])
    admin.create_topics([placed])[name].result(30)
    admin.create_partitions([NewPartitions(name, 4, replica_assignment=[[1, 2]])])[name].result(30)
    with django_db_blocker.unblock():
        assert stored_replicas(env.tenant_a, name) == [[2, 1], [1, 2], [2, 1], [1, 2]]
        topic = Topic.objects.get(tenant__slug=env.tenant_a, name=name)
        assert (topic.partition_count, topic.replication_factor) == (4, 2)
        # Audited under the operator's name, not as "system".
        actors = set(AuditEvent.objects.filter(object_repr=name).values_list("actor", flat=True))
        assert actors == {"ops"}

    # The tenant's own clients see the placement and use the topic as any other.
    tenant_admin = admin_for(env, {**confluent_conf(env, env.admin_a)}, warm=False)
    # The broker asked may learn of the fourth partition a moment after the controller
    # answered; ask until it shows all four (bounded).
    deadline = time.monotonic() + 20
    described = tenant_admin.list_topics(name, timeout=20).topics[name].partitions
    while len(described) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
        described = tenant_admin.list_topics(name, timeout=20).topics[name].partitions
    assert [described[i].replicas for i in range(4)] == [[2, 1], [1, 2], [2, 1], [1, 2]]
    assert [described[i].leader for i in range(4)] == [2, 1, 2, 1]
    producer = Producer(confluent_conf(env, env.admin_a, **{"acks": "all"}))
    for i in range(4):
        producer.produce(name, b"v%d" % i, partition=i)
    assert producer.flush(30) == 0
    # Metadata reaches each broker a moment after a change: a consumer that subscribed while
    # the broker it asked still showed three partitions would keep that view for minutes
    # (librdkafka's default topic.metadata.refresh.interval.ms); refresh every second.
    consumer = Consumer(
        confluent_conf(
            env,
            env.admin_a,
            **{
                "group.id": name,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
            },
        )
    )
    consumer.subscribe([name])
    got = []
    for _ in range(60):
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got.append(message.value())
        if len(got) == 4:
            break
    consumer.close()
    assert sorted(got) == [b"v0", b"v1", b"v2", b"v3"]


def test_kafka_python_operators_place_replicas_too(cluster, django_db_blocker):
    from kafka.admin import KafkaAdminClient, NewTopic

    env = cluster[0]
    with django_db_blocker.unblock():
        conf = operator_settings(env.tenant_b, "ops-b")
    admin = KafkaAdminClient(
        bootstrap_servers=env.bootstrap,
        security_protocol=conf["security.protocol"],
        sasl_mechanism=conf["sasl.mechanism"],
        sasl_plain_username=conf["sasl.username"],
        sasl_plain_password=conf["sasl.password"],
    )
    name = topic_name("kp-placed")
    try:
        admin.create_topics([NewTopic(name, -1, -1, replica_assignments={0: [1], 1: [2]})])
    finally:
        admin.close()
    with django_db_blocker.unblock():
        assert stored_replicas(env.tenant_b, name) == [[1], [2]]
        # In the tenant the operator acted in, and no other.
        assert not Topic.objects.filter(tenant__slug=env.tenant_a, name=name).exists()


@pytest.mark.parametrize(
    ("assignment", "why"),
    [
        ([[1, 9]], "broker(s) [9] are not live"),
        ([[1, 2], [1]], "partition 1 has 1 replicas; every partition needs 2"),
        ([[1, 1]], "names a broker twice"),
    ],
)
def test_a_bad_assignment_is_refused_and_leaves_nothing(
    cluster, django_db_blocker, assignment, why
):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    env = cluster[0]
    with django_db_blocker.unblock():
        conf = operator_settings(env.tenant_a)
    admin = admin_for(env, conf)
    name = topic_name("badly-placed")
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)])[
            name
        ].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert why in refused.value.args[0].str()
    with django_db_blocker.unblock():
        assert not Topic.objects.filter(tenant__slug=env.tenant_a, name=name).exists()
    # The next good request on the same client succeeds.
    admin.create_topics([NewTopic(name, 1, replica_assignment=[[1]])])[name].result(30)


def test_an_operator_administers_but_does_not_write_records(cluster, django_db_blocker):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import NewTopic

    env = cluster[0]
    with django_db_blocker.unblock():
        conf = operator_settings(env.tenant_a)
    name = topic_name("ops-no-write")
    admin = admin_for(env, conf)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    errors = []
    producer = Producer({"bootstrap.servers": env.bootstrap, **conf})
    producer.produce(name, b"x", on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_only_active_staff_get_or_keep_operator_credentials(cluster, django_db_blocker):
    from confluent_kafka import KafkaException

    env = cluster[0]
    with django_db_blocker.unblock():
        with pytest.raises(CommandError, match="not an active staff user"):
            operator_settings(env.tenant_a, "not-staff")
        conf = operator_settings(env.tenant_a, "leaving")
        with pytest.raises(CommandError, match="no tenant"):
            call_command("operator_credentials", "leaving", "no-such-tenant", stdout=io.StringIO())
    admin_for(env, conf).list_topics(timeout=20)  # works while the user is staff
    # On a connection of its own, so that it commits (this test runs in a transaction) and
    # the brokers see it.
    with django_db_blocker.unblock(), connect(**pg_params()) as other:
        table = get_user_model()._meta.db_table
        other.execute(f"UPDATE {table} SET is_staff = false WHERE username = 'leaving'")
    admin = admin_for(env, conf, warm=False)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    # A tenant key's user name with the operator's password proves nothing either.
    forged = {**conf, "sasl.username": conf["sasl.username"].replace(env.tenant_a, env.tenant_b)}
    with pytest.raises(KafkaException):
        admin_for(env, forged, warm=False).list_topics(timeout=5)


def test_a_tenant_key_still_cannot_place_replicas_with_kafka_python(cluster):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import PolicyViolationError

    env = cluster[0]
    admin = KafkaAdminClient(**kafka_python_conf(env, env.admin_a))
    try:
        with pytest.raises(PolicyViolationError):
            admin.create_topics(
                [NewTopic(topic_name("kp-refused"), -1, -1, replica_assignments={0: [1]})]
            )
    finally:
        admin.close()
