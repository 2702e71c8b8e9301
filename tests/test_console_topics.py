"""Console topic pages (server-side, Django's test client): roles, validation messages from
the services, typed delete confirmation, tenant isolation. No broker runs here, so the
partitions table says the offsets are unavailable; the browser suite covers live brokers.
"""

from __future__ import annotations

import pytest
from django.test import Client

from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Topic
from frontend.units import duration_ms, split_duration
from tests.conftest import SYSTEM


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def create_form(**overrides):
    form = {
        "name": "orders",
        "partitions": "3",
        "replication_factor": "1",
        "retention_amount": "2",
        "retention_unit": "d",
        "cleanup_policy": "delete",
    }
    form.update(overrides)
    return form


def test_duration_units_round_trip():
    assert duration_ms("2", "d", "r") == 172_800_000
    assert duration_ms("0", "forever", "r") == -1
    assert split_duration(172_800_000) == ("2", "d")
    assert split_duration(90_000) == ("90", "s")
    assert split_duration(-1) == ("", "forever")
    with pytest.raises(Exception, match="whole number"):
        duration_ms("two", "d", "r")


def test_developer_creates_a_topic_with_human_retention(developer, tenant_a):
    client = signed_in(developer)
    assert "Create topic" in client.get("/t/acme/topics/").content.decode()
    response = client.post("/t/acme/create-topic/", create_form())
    assert response.status_code == 302
    assert response.url == "/t/acme/topics/orders/"
    topic = Topic.objects.get(tenant=tenant_a, name="orders")
    assert topic.partition_count == 3
    assert topic.configs == {"retention.ms": 172_800_000, "cleanup.policy": "delete"}
    assert AuditEvent.objects.filter(action="topic.create", actor_user=developer).exists()
    page = client.get("/t/acme/topics/orders/").content.decode()
    assert "2 d" in page and "Offsets unavailable" in page
    assert page.count("<tr") >= 3 + 1  # a row per partition


@pytest.mark.parametrize(
    ("overrides", "field_message"),
    [
        ({"name": "bad name!"}, "may contain only ASCII letters"),
        ({"partitions": "0"}, "partition"),
        ({"partitions": "many"}, "whole number"),
        ({"retention_amount": "-3"}, "0 or more"),
        ({"cleanup_policy": "shred"}, "cleanup.policy must be one of"),
    ],
)
def test_invalid_create_shows_the_message_and_creates_nothing(
    developer, tenant_a, overrides, field_message
):
    response = signed_in(developer).post("/t/acme/create-topic/", create_form(**overrides))
    assert response.status_code == 400
    page = response.content.decode()
    assert field_message in page
    assert 'class="error"' in page  # shown at its field
    assert not Topic.objects.filter(tenant=tenant_a).exists()


def test_duplicate_name_is_reported_on_the_name_field(developer, tenant_a):
    catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
    response = signed_in(developer).post("/t/acme/create-topic/", create_form())
    assert response.status_code == 400
    assert "already exists" in response.content.decode()


def test_viewer_sees_but_cannot_change(viewer, tenant_a):
    catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
    client = signed_in(viewer)
    listing = client.get("/t/acme/topics/").content.decode()
    assert "orders" in listing and "Create topic" not in listing
    detail = client.get("/t/acme/topics/orders/").content.decode()
    assert "Delete topic" not in detail and "Save configuration" not in detail
    assert client.get("/t/acme/create-topic/").status_code == 403
    assert client.post("/t/acme/topics/orders/delete/", {"confirm": "orders"}).status_code == 403
    assert client.post("/t/acme/topics/orders/partitions/", {"partitions": "4"}).status_code == 403
    assert client.post("/t/acme/topics/orders/configs/", {"retention.ms": "1"}).status_code == 403
    assert Topic.objects.get(tenant=tenant_a, name="orders").partition_count == 1


def test_edit_configs_add_partitions_and_typed_delete(developer, tenant_a):
    catalog_services.create_topic(
        SYSTEM, tenant_a, name="orders", partition_count=1, configs={"retention.ms": 60_000}
    )
    client = signed_in(developer)
    base = "/t/acme/topics/orders/"
    # Changed values are saved; a reset drops the override; unchanged ones stay untouched.
    client.post(
        base + "configs/",
        {"retention.ms": "60000", "reset:retention.ms": "1", "cleanup.policy": "compact"},
    )
    assert Topic.objects.get(name="orders").configs == {"cleanup.policy": "compact"}
    response = client.post(base + "configs/", {"min.insync.replicas": "5"}, follow=True)
    assert "cannot exceed the replication factor" in response.content.decode()
    assert Topic.objects.get(name="orders").configs == {"cleanup.policy": "compact"}

    response = client.post(base + "partitions/", {"partitions": "1"}, follow=True)
    page = response.content.decode()
    assert response.status_code == 400 and 'id="partitions-error"' in page
    assert "already has 1 partitions" in page.split('id="partitions-error"')[1]
    tag = page.split('id="id_partitions"')[1].split(">")[0]
    assert 'value="1"' in tag, tag  # as typed
    client.post(base + "partitions/", {"partitions": "4"})
    assert Topic.objects.get(name="orders").partition_count == 4

    response = client.post(base + "delete/", {"confirm": "order"}, follow=True)
    assert "Type the topic" in response.content.decode()
    assert Topic.objects.filter(name="orders").exists()
    response = client.post(base + "delete/", {"confirm": "orders"})
    assert response.status_code == 302 and response.url == "/t/acme/topics/"
    assert not Topic.objects.filter(name="orders").exists()


def test_search_returns_rows_only_to_htmx(owner, tenant_a):
    for name in ("orders", "payments"):
        catalog_services.create_topic(SYSTEM, tenant_a, name=name, partition_count=1)
    client = signed_in(owner)
    partial = client.get("/t/acme/topics/?q=pay", HTTP_HX_REQUEST="true").content.decode()
    assert "payments" in partial and "orders" not in partial and "<html" not in partial
    full = client.get("/t/acme/topics/?q=pay").content.decode()
    assert "<html" in full and "payments" in full


def test_other_tenants_topics_do_not_exist(owner, outsider, tenant_a, tenant_b):
    catalog_services.create_topic(SYSTEM, tenant_b, name="secret-plans", partition_count=1)
    client = signed_in(owner)
    assert client.get("/t/globex/topics/secret-plans/").status_code == 404
    assert client.post("/t/globex/create-topic/", create_form()).status_code == 404
    response = client.post("/t/globex/topics/secret-plans/delete/", {"confirm": "secret-plans"})
    assert response.status_code == 404
    assert Topic.objects.filter(name="secret-plans").exists()
    assert client.get("/t/acme/topics/secret-plans/").status_code == 404
