"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455) over the Kafka
protocol, with kafka-python's admin client (confluent-kafka has neither): an operator moves
a partition of replication factor 1 from broker 1 to broker 2 and cancels another move; a
tenant's key is refused. Two real broker processes; the test process plays the controller
(``complete_reassignments``, on its own committed connection, as in test_reassignment)."""

from __future__ import annotations

import pytest

from control_plane.controller import reassign
from tests.broker import test_elect_leaders
from tests.broker.conftest import confluent_conf, kafka_python_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_elect_leaders import OPS, row, wait_for
from tests.broker.test_operator_principal import admin_for, operator_settings
from tests.broker.test_reassignment import committed

pytestmark = pytest.mark.django_db
cluster = test_elect_leaders.cluster  # two brokers and a staff user for the operator


def kafka_python_admin(conf: dict):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(**conf)


def test_an_operator_moves_a_partition_and_cancels_a_move(cluster, django_db_blocker):
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic
    from kafka import TopicPartition
    from kafka.errors import ClusterAuthorizationFailedError, NoReassignmentInProgressError

    first, _ = cluster
    with django_db_blocker.unblock():
        conf = operator_settings(first.tenant_a, OPS)
    name = topic_name("moved")
    creator = admin_for(first, conf)
    creator.create_topics([NewTopic(name, 2, replica_assignment=[[1], [1]])])[name].result(30)
    producer = Producer(confluent_conf(first, first.admin_a, **{"acks": "all"}))
    for i in range(5):
        producer.produce(name, b"v%d" % i, partition=0)
    assert producer.flush(30) == 0

    ops = kafka_python_admin(
        {
            "bootstrap_servers": first.bootstrap,
            "security_protocol": conf["security.protocol"],
            "sasl_mechanism": conf["sasl.mechanism"],
            "sasl_plain_username": conf["sasl.username"],
            "sasl_plain_password": conf["sasl.password"],
        }
    )
    tenant = kafka_python_admin(kafka_python_conf(first, first.admin_a))
    tp0, tp1 = TopicPartition(name, 0), TopicPartition(name, 1)
    try:
        # A tenant's key may do neither.
        with pytest.raises(ClusterAuthorizationFailedError):
            tenant.alter_partition_reassignments({tp0: [2]})
        with pytest.raises(ClusterAuthorizationFailedError):
            tenant.list_partition_reassignments()
        with django_db_blocker.unblock():
            assert list(row(first.tenant_a, name, 0).replicas) == [1]

        assert ops.alter_partition_reassignments({tp0: [2]}) == {tp0: None}
        assert ops.list_partition_reassignments({name: [0, 1]}) == {
            tp0: {"replicas": [2, 1], "adding_replicas": [2], "removing_replicas": [1]}
        }

        # Broker 2 copies the log, joins the ISR; the controller switches.
        def moved() -> bool:
            committed(reassign.complete_reassignments)
            return list(row(first.tenant_a, name, 0).replicas) == [2]

        with django_db_blocker.unblock():
            wait_for("the move to complete", moved)
        assert ops.list_partition_reassignments() == {}

        from confluent_kafka.admin import AdminClient

        tenant_view = AdminClient(confluent_conf(first, first.admin_a))

        def metadata_shows_it() -> bool:
            p = tenant_view.list_topics(name, timeout=20).topics[name].partitions[0]
            return p.replicas == [2] and p.leader == 2

        wait_for("Metadata to show the new replica", metadata_shows_it)

        # A move cancelled before it completes leaves the partition where it was.
        assert ops.alter_partition_reassignments({tp1: [2]}) == {tp1: None}
        assert set(ops.list_partition_reassignments()) == {tp1}
        assert ops.alter_partition_reassignments({tp1: None}) == {tp1: None}
        assert ops.list_partition_reassignments() == {}
        with django_db_blocker.unblock():
            assert list(row(first.tenant_a, name, 1).replicas) == [1]
        again = ops.alter_partition_reassignments({tp1: None})
        assert again == {tp1: NoReassignmentInProgressError}
    finally:
        ops.close()
        tenant.close()
