"""The development listener (``--allow-anonymous``) with two brokers: replication still
signs in (SASL on a connection that started anonymous), and so may any client."""

from __future__ import annotations

import time

import pytest

from control_plane.catalog.models import Topic
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Tenant
from data_plane.protocol.errors import ErrorCode as E
from tests.broker.conftest import _brokers, start_broker, stop_broker
from tests.broker.test_clients import topic_name
from tests.broker.test_replication import raw_produce, row, wait_for, wait_identical
from tests.broker.test_wire import RawClient
from tests.conftest import SYSTEM

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def dev_cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        if not Tenant.objects.filter(slug="default").exists():
            tenancy_services.create_tenant(SYSTEM, slug="default", name="Default")
    envs = _brokers(
        django_db_blocker, tmp_path_factory, 2, {"MILLRACE_REPLICA_FETCH_WAIT_MS": "100"}
    )
    first = next(envs)
    for k in first:  # restart both on the development listener
        stop_broker(k)
        k.allow_anonymous = True
        start_broker(k)
    yield first
    next(envs, None)
    with django_db_blocker.unblock():
        Topic.objects.filter(tenant__slug="default").delete()
        Tenant.objects.filter(slug="default").delete()


def test_brokers_on_the_development_listener_replicate(dev_cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    name = topic_name("dev")
    admin = AdminClient({"bootstrap.servers": dev_cluster[0].bootstrap})  # anonymous
    admin.create_topics([NewTopic(name, 1, 2)])[name].result(timeout=20)
    topic = Topic.objects.get(name=name, tenant__slug="default")
    leader = next(k for k in dev_cluster if k.broker_id == row(topic).leader)
    client = RawClient(leader)  # anonymous: the default tenant
    codes = []
    for _ in range(50):  # until the leader's metadata has the new topic
        codes.append(raw_produce(leader, name, -1, range(10), client=client))
        if codes[-1] != E.UNKNOWN_TOPIC_OR_PARTITION:
            break
        time.sleep(0.1)
    client.close()
    assert codes[-1] == E.NONE, codes
    wait_identical(dev_cluster, topic)
    wait_for(lambda: len(row(topic).isr) == 2, 10, "both replicas in sync")


def test_a_client_may_sign_in_on_the_development_listener(dev_cluster):
    client = RawClient(dev_cluster[0])
    client.login(dev_cluster[0].admin_a)  # SASL after starting anonymous
    assert client.request(
        3,
        9,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )["brokers"]
    client.close()


def test_the_console_names_the_development_listener(dev_cluster):
    from django.test import Client

    from control_plane.catalog.models import Broker
    from tests.conftest import make_user

    assert set(Broker.objects.values_list("dev_listener", flat=True)) == {True}
    operator = Client()
    operator.force_login(make_user("op-dev-listener", staff=True))
    page = operator.get("/cluster/").content.decode()
    assert page.count("development listener: no credentials needed") == len(dev_cluster)
