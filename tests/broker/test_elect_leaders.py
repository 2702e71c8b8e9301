"""ElectLeaders (KIP-460) over the Kafka protocol: an operator puts leadership back on the
preferred replica with confluent-kafka's ``AdminClient.elect_leaders``; a tenant's key is
refused. Two real broker processes; the oracle is the Partition rows the controller keeps
and what Metadata answers a tenant's key."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model

from control_plane.audit.models import AuditEvent
from control_plane.catalog.models import Partition
from tests.broker.conftest import _brokers, confluent_conf, start_broker, stop_broker
from tests.broker.test_clients import topic_name
from tests.broker.test_operator_principal import admin_for, operator_settings

pytestmark = pytest.mark.django_db

OPS = "ops-elect"


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        get_user_model().objects.update_or_create(
            username=OPS, defaults={"is_staff": True, "is_active": True}
        )
    try:
        yield from _brokers(django_db_blocker, tmp_path_factory, 2)
    finally:
        with django_db_blocker.unblock():
            get_user_model().objects.filter(username=OPS).delete()


def row(tenant: str, name: str, index: int) -> Partition:
    return Partition.objects.get(topic__tenant__slug=tenant, topic__name=name, index=index)


def wait_for(what, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_preferred_election_puts_leadership_back_and_tenants_are_refused(
    cluster, django_db_blocker
):
    from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import NewTopic

    first, second = cluster
    with django_db_blocker.unblock():
        conf = operator_settings(first.tenant_a, OPS)
    admin = admin_for(first, conf)
    name = topic_name("elect")
    admin.create_topics([NewTopic(name, 2, replica_assignment=[[1, 2], [2, 1]])])[name].result(30)
    p0 = TopicPartition(name, 0)
    done = admin.elect_leaders(ElectionType.PREFERRED, [p0]).result(30)
    assert done[p0] is not None and done[p0].code() == KafkaError.ELECTION_NOT_NEEDED

    # Broker 1 restarts: partition 0 moves to broker 2, then broker 1 catches up.
    stop_broker(first)
    with django_db_blocker.unblock():
        assert row(first.tenant_a, name, 0).leader == 2
    start_broker(first)
    with django_db_blocker.unblock():
        wait_for("broker 1 back in sync", lambda: 1 in row(first.tenant_a, name, 0).isr)
        assert row(first.tenant_a, name, 0).leader == 2

    # A tenant's key, even one allowed everything in its tenant, is refused.
    tenant_admin = admin_for(second, confluent_conf(second, second.admin_a), warm=False)
    with pytest.raises(KafkaException) as refused:
        tenant_admin.elect_leaders(ElectionType.PREFERRED, [p0]).result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with django_db_blocker.unblock():
        assert row(first.tenant_a, name, 0).leader == 2

    # The operator's preferred election gives partition 0 back to broker 1.
    admin = admin_for(second, conf)
    done = admin.elect_leaders(ElectionType.PREFERRED, [p0]).result(30)
    assert done == {p0: None}
    with django_db_blocker.unblock():
        assert row(first.tenant_a, name, 0).leader == 1

    def tenant_sees_broker_1_lead() -> bool:
        meta = tenant_admin.list_topics(name, timeout=20).topics[name].partitions
        return meta[0].leader == 1 and meta[1].leader == 2

    wait_for("Metadata to show the preferred leaders", tenant_sees_broker_1_lead)
    # Everything: nothing is left to elect, so nothing is answered.
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}
    # Unclean, where a live leader leads: not needed (and nothing is audited).
    done = admin.elect_leaders(ElectionType.UNCLEAN, [p0]).result(30)
    assert done[p0] is not None and done[p0].code() == KafkaError.ELECTION_NOT_NEEDED
    with django_db_blocker.unblock():
        assert not AuditEvent.objects.filter(action="partition.unclean_election").exists()
