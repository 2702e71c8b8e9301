"""The client versions a tenant's applications use: the API's flat list and the console
page's view by client identity (catalog.client_versions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from control_plane.catalog import client_versions
from control_plane.catalog.models import ClientVersion
from tests.conftest import session_client


def _row(tenant, api_key, version, *, served=True, software=("sarama", "1.22.1"), **kw):
    now = kw.pop("now", timezone.now())
    return ClientVersion.objects.create(
        tenant=tenant,
        principal=kw.pop("principal", "User:app"),
        client_id=kw.pop("client_id", "orders"),
        software_name=software[0],
        software_version=software[1],
        api_key=api_key,
        api_version=version,
        served=served,
        requests=kw.pop("requests", 1),
        first_seen=now - timedelta(minutes=5),
        last_seen=now,
        last_broker=1,
    )


def test_the_api_lists_the_tenants_versions_with_what_kafka4_refuses(
    tenant_a, tenant_b, viewer, make_key
):
    _row(tenant_a, 0, 2, requests=10)  # Produce v2: served here, Kafka 4 refuses it
    _row(tenant_a, 1, 12)  # Fetch v12: fine everywhere
    _row(tenant_a, 0, 13, served=False)  # refused here
    _row(tenant_b, 0, 9)  # another tenant's
    response = session_client(viewer).get("/api/v1/tenants/acme/client-versions/")
    assert response.status_code == 200
    rows = {(r["api"], r["api_version"]): r for r in response.json()["results"]}
    assert set(rows) == {("Produce", 2), ("Fetch", 12), ("Produce", 13)}
    assert rows[("Produce", 2)]["kafka4_refuses"] is True
    assert rows[("Produce", 2)]["requests"] == 10
    assert rows[("Fetch", 12)]["kafka4_refuses"] is False
    assert rows[("Produce", 13)]["served"] is False
    assert rows[("Produce", 13)]["kafka4_refuses"] is False
    # A key needs Describe on the cluster (the tenant's own metadata, as for keys/ACLs).
    nothing, _, _ = make_key(tenant_a, [("topic", "literal", "*", "read")])
    assert nothing.get("/api/v1/tenants/acme/client-versions/").status_code == 403
    describer, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "describe")])
    assert len(describer.get("/api/v1/tenants/acme/client-versions/").json()["results"]) == 3
    assert session_client(viewer).get("/api/v1/tenants/globex/client-versions/").status_code in (
        403,
        404,
    )


def test_identities_group_versions_and_flag_who_must_upgrade(tenant_a):
    _row(tenant_a, 0, 2)
    _row(tenant_a, 0, 3)
    _row(tenant_a, 1, 3)
    _row(tenant_a, 18, 5, served=False)
    _row(tenant_a, 0, 9, software=("confluent-kafka-python", "2.16.1"), client_id="rdkafka")
    found = {c.software_name: c for c in client_versions.identities(tenant_a)}
    old = found["sarama"]
    assert [(a.api, a.min_version, a.max_version) for a in old.apis] == [
        ("Produce", 2, 3),
        ("Fetch", 3, 3),
    ]
    assert [(u.api, u.version) for u in old.kafka4_refuses] == [("Produce", 2), ("Fetch", 3)]
    assert [(u.api, u.version) for u in old.unserved] == [("ApiVersions", 5)]
    assert old.must_upgrade
    assert not found["confluent-kafka-python"].must_upgrade


def test_rows_not_seen_for_the_keep_days_are_pruned(tenant_a, settings):
    settings.MILLRACE_CLIENT_VERSIONS_KEEP_DAYS = 30
    now = datetime(2026, 11, 27, tzinfo=UTC)
    _row(tenant_a, 0, 2, now=now - timedelta(days=31))
    kept = _row(tenant_a, 0, 3, now=now - timedelta(days=29))
    assert client_versions.prune(now) == 1
    assert list(ClientVersion.objects.values_list("pk", flat=True)) == [kept.pk]


def test_the_console_page_shows_each_client_and_what_to_upgrade(tenant_a, viewer):
    from django.test import Client

    _row(tenant_a, 0, 2)
    _row(tenant_a, 0, 13, served=False)
    _row(tenant_a, 0, 9, software=("", ""), client_id="legacy-app")
    client = Client()
    client.force_login(viewer)
    page = client.get("/t/acme/clients/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Produce v2: Kafka 4 refuses" in html
    assert "Produce v13 refused here" in html
    assert "not named (ApiVersions below v3)" in html and "legacy-app" in html
    assert "2 clients; <strong>1 should upgrade</strong>" in html


def test_operators_see_every_tenants_clients_that_should_upgrade(tenant_a, tenant_b, operator):
    from django.test import Client

    _row(tenant_a, 0, 2, client_id="old-producer")  # Kafka 4 refuses Produce v2
    _row(tenant_a, 0, 9, client_id="fine-producer")  # current: not listed
    _row(tenant_b, 3, 99, served=False, client_id="odd-client")  # refused here
    found = {(c.tenant_slug, c.client_id) for c in client_versions.to_upgrade()}
    assert found == {(tenant_a.slug, "old-producer"), (tenant_b.slug, "odd-client")}
    client = Client()
    client.force_login(operator)
    html = client.get("/cluster/").content.decode()
    assert "Clients that should upgrade" in html
    assert "old-producer" in html and "odd-client" in html and "fine-producer" not in html
    assert "Metadata v99 refused here" in html and "Produce v2: Kafka 4 refuses" in html
