"""Topic CRUD, configs and partitions: validation names the field, nothing is half-written."""

from __future__ import annotations

import pytest
from django.utils import timezone

from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker, Partition, Topic
from tests.conftest import SYSTEM, session_client

T = "/api/v1/tenants/acme/topics"


@pytest.fixture
def client(owner):
    return session_client(owner)


def counts():
    return Topic.objects.count(), Partition.objects.count(), AuditEvent.objects.count()


def test_create_read_delete(client):
    response = client.post(
        T + "/",
        {
            "name": "orders",
            "partition_count": 3,
            "configs": {"retention.ms": 86_400_000, "cleanup.policy": "compact,delete"},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["partition_count"] == 3
    assert body["replication_factor"] == 1  # no brokers yet
    assert body["configs"] == {"retention.ms": 86_400_000, "cleanup.policy": "delete,compact"}
    topic = Topic.objects.get(name="orders")
    assert str(topic.topic_id) == body["topic_id"]
    partitions = client.get(f"{T}/orders/partitions/").json()
    assert [p["index"] for p in partitions] == [0, 1, 2]
    assert all(p["leader"] is None and p["replicas"] == [] for p in partitions)
    assert client.get(f"{T}/orders/").json()["name"] == "orders"
    assert client.delete(f"{T}/orders/").status_code == 204
    assert client.get(f"{T}/orders/").status_code == 404
    assert not Partition.objects.filter(topic_id=topic.pk).exists()
    actions = list(AuditEvent.objects.filter(object_repr="orders").values_list("action", flat=True))
    assert sorted(actions) == ["topic.create", "topic.delete"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "bad name", "partition_count": 1}, "name"),
        ({"name": "..", "partition_count": 1}, "name"),
        ({"name": "x" * 250, "partition_count": 1}, "name"),
        ({"name": "__consumer_offsets", "partition_count": 1}, "name"),
        ({"name": "ok", "partition_count": 0}, "partition_count"),
        ({"name": "ok", "partition_count": "many"}, "partition_count"),
        ({"name": "ok"}, "partition_count"),
        ({"name": "ok", "partition_count": 1, "replication_factor": 0}, "replication_factor"),
        ({"name": "ok", "partition_count": 1, "replication_factor": 4}, "replication_factor"),
        (
            {"name": "ok", "partition_count": 1, "configs": {"retention.ms": -7}},
            "configs.retention.ms",
        ),
        (
            {"name": "ok", "partition_count": 1, "configs": {"retension.ms": 1}},
            "configs.retension.ms",
        ),
        (
            {"name": "ok", "partition_count": 1, "configs": {"min.insync.replicas": 2}},
            "configs.min.insync.replicas",
        ),
        ({"name": "ok", "partition_count": 1, "configs": "retention.ms=1"}, "configs"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_writes_nothing(client, body, field):
    before = counts()
    response = client.post(T + "/", body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["details"], error
    assert error["message"]
    assert counts() == before


def test_duplicate_and_colliding_names(client):
    assert (
        client.post(T + "/", {"name": "a.b", "partition_count": 1}, format="json").status_code
        == 201
    )
    before = counts()
    dup = client.post(T + "/", {"name": "a.b", "partition_count": 1}, format="json")
    assert dup.status_code == 400
    assert dup.json()["error"]["code"] == "already_exists"
    collide = client.post(T + "/", {"name": "a_b", "partition_count": 1}, format="json")
    assert collide.status_code == 400
    assert "collides" in collide.json()["error"]["details"]["name"][0]
    assert counts() == before


def test_same_name_in_another_tenant_is_fine(client, tenant_b):
    catalog_services.create_topic(SYSTEM, tenant_b, name="orders", partition_count=1)
    assert (
        client.post(T + "/", {"name": "orders", "partition_count": 1}, format="json").status_code
        == 201
    )


def test_partition_limit(client, tenant_a):
    tenant_a.max_partitions = 10
    tenant_a.save()
    assert (
        client.post(T + "/", {"name": "a", "partition_count": 8}, format="json").status_code == 201
    )
    before = counts()
    response = client.post(T + "/", {"name": "b", "partition_count": 3}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "limit_exceeded"
    grow = client.post(f"{T}/a/partitions/", {"partition_count": 11}, format="json")
    assert grow.json()["error"]["code"] == "limit_exceeded"
    assert counts() == before


def test_add_partitions_only_grows(client):
    client.post(T + "/", {"name": "t", "partition_count": 2}, format="json")
    before = counts()
    for count in (1, 2):
        response = client.post(f"{T}/t/partitions/", {"partition_count": count}, format="json")
        assert response.status_code == 400
        assert "partition_count" in response.json()["error"]["details"]
    assert counts() == before
    response = client.post(f"{T}/t/partitions/", {"partition_count": 5}, format="json")
    assert response.status_code == 200 and response.json()["partition_count"] == 5
    assert [p["index"] for p in client.get(f"{T}/t/partitions/").json()] == [0, 1, 2, 3, 4]


def test_alter_configs_set_reset_and_validate(client):
    client.post(T + "/", {"name": "t", "partition_count": 1}, format="json")
    entries = client.patch(
        f"{T}/t/configs/", {"retention.ms": "3600000", "segment.ms": 600000}, format="json"
    ).json()
    by_name = {e["name"]: e for e in entries}
    assert (
        by_name["retention.ms"]["value"] == 3_600_000 and not by_name["retention.ms"]["is_default"]
    )
    assert by_name["cleanup.policy"]["is_default"]
    entries = client.patch(f"{T}/t/configs/", {"retention.ms": None}, format="json").json()
    by_name = {e["name"]: e for e in entries}
    assert by_name["retention.ms"]["is_default"] and by_name["retention.ms"]["value"] == 604_800_000
    assert by_name["segment.ms"]["value"] == 600000
    topic = Topic.objects.get(name="t")
    for bad in (
        {"nope": 1},
        {"nope": None},
        {"retention.bytes": -2},
        {"segment.bytes": "big"},
        {"min.insync.replicas": 5},
        ["retention.ms"],
    ):
        response = client.patch(f"{T}/t/configs/", bad, format="json")
        assert response.status_code == 400, (bad, response.content)
    topic.refresh_from_db()
    assert topic.configs == {"segment.ms": 600000}


def test_replication_factor_bounded_by_live_brokers(client):
    now = timezone.now()
    Broker.objects.create(id=1, host="127.0.0.1", port=9092, last_heartbeat=now)
    Broker.objects.create(id=2, host="127.0.0.1", port=9093, last_heartbeat=now)
    Broker.objects.create(
        id=3, host="127.0.0.1", port=9094, last_heartbeat=now - timezone.timedelta(minutes=5)
    )
    response = client.post(
        T + "/", {"name": "t", "partition_count": 1, "replication_factor": 3}, format="json"
    )
    assert response.status_code == 400
    assert "live brokers" in response.json()["error"]["details"]["replication_factor"][0]
    response = client.post(T + "/", {"name": "t", "partition_count": 1}, format="json")
    assert response.json()["replication_factor"] == 2  # default: min(3, live brokers)


def test_search_and_pagination(client):
    for name in ("alpha", "beta", "alphabet"):
        client.post(T + "/", {"name": name, "partition_count": 1}, format="json")
    assert [t["name"] for t in client.get(T + "/?search=alp").json()["results"]] == [
        "alpha",
        "alphabet",
    ]
    page = client.get(T + "/?limit=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
