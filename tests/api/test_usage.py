"""The usage API: a tenant's hourly usage by topic, principal (chargeback) or hour, CSV
export, who may read it, and the operators' view of every tenant."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest

from control_plane.catalog import services as catalog_services
from control_plane.usage import services as usage
from data_plane.broker.usage import HOUR, Meter
from tests.conftest import SYSTEM, session_client

T = "/api/v1/tenants/acme"
T0 = 1_800_000_000 // HOUR * HOUR
START = datetime.fromtimestamp(T0, tz=UTC).isoformat()
END = datetime.fromtimestamp(T0 + 2 * HOUR, tz=UTC).isoformat()
Q = {"start": START, "end": END}


@pytest.fixture
def metered(tenant_a, tenant_b):
    orders = catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
    theirs = catalog_services.create_topic(SYSTEM, tenant_b, name="orders", partition_count=1)
    for at, nbytes in ((T0 + 10, 1000), (T0 + HOUR + 10, 500)):
        meter = Meter(clock=lambda at=at: at)
        meter.produced(tenant_a.pk, orders.topic_id, "orders", "User:app", nbytes, 10)
        meter.fetched(tenant_a.pk, orders.topic_id, "orders", "User:bi", 2 * nbytes, 20)
        meter.request(tenant_a.pk, "User:app")
        meter.produced(tenant_b.pk, theirs.topic_id, "orders", "User:x", 7, 1)
        report = meter.report()
        assert report is not None
        usage.ingest(1, report)
    usage.aggregate()


def test_a_tenants_usage_by_topic_principal_and_hour(metered, viewer, outsider, make_key, tenant_a):
    client = session_client(viewer)
    by_topic = client.get(f"{T}/usage/", Q).json()
    assert [r["topic"] for r in by_topic["rows"]] == ["orders"]
    assert by_topic["rows"][0]["produce_bytes"] == 1500
    assert by_topic["totals"]["fetch_bytes"] == 3000
    by_sa = {
        r["principal"]: r
        for r in client.get(f"{T}/usage/", {**Q, "group_by": "principal"}).json()["rows"]
    }
    assert by_sa["User:app"]["produce_bytes"] == 1500 and by_sa["User:app"]["requests"] == 2
    assert by_sa["User:bi"]["fetch_bytes"] == 3000 and "User:x" not in by_sa
    hours = client.get(f"{T}/usage/", {**Q, "group_by": "hour"}).json()["rows"]
    assert [h["produce_bytes"] for h in hours] == [1000, 500]
    bad = client.get(f"{T}/usage/", {**Q, "group_by": "tenant"})
    assert bad.status_code == 400 and "group_by" in bad.json()["error"]["details"]
    assert client.get(f"{T}/usage/", {"start": "yesterday"}).status_code == 400
    assert client.get(f"{T}/usage/", {"start": END, "end": START}).status_code == 400
    assert session_client(outsider).get(f"{T}/usage/", Q).status_code == 404
    denied, _, _ = make_key(tenant_a, [("topic", "literal", "*", "read")])
    assert denied.get(f"{T}/usage/", Q).status_code == 403
    allowed, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "describe")])
    assert allowed.get(f"{T}/usage/", Q).json()["totals"]["produce_bytes"] == 1500


def test_csv_export_has_every_hourly_row(metered, viewer):
    response = session_client(viewer).get(f"{T}/usage/", {**Q, "format": "csv"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["tenant"] for r in rows} == {"acme"}
    produced = sum(int(r["produce_bytes"]) for r in rows)
    assert produced == 1500 and len(rows) == 6  # 2 hours x (app, bi, requests)
    assert (
        session_client(viewer).get(f"{T}/usage/", {"start": "x", "format": "csv"}).status_code
        == 400
    )


def test_operators_see_every_tenant_and_aggregate_on_demand(metered, owner, operator):
    assert session_client(owner).get("/api/v1/usage/", Q).status_code == 403
    assert session_client(owner).post("/api/v1/usage/").status_code == 403
    rows = {
        r["tenant"]: r for r in session_client(operator).get("/api/v1/usage/", Q).json()["rows"]
    }
    assert rows["acme"]["produce_bytes"] == 1500 and rows["globex"]["produce_bytes"] == 14
    run = session_client(operator).post("/api/v1/usage/")
    # Raw rows written within the last two minutes are summed again (idempotent). (Other
    # tests' committed rows may be in this database too: only these tenants are compared.)
    assert run.status_code == 200 and run.json()["hours"] >= 2
    again = {
        r["tenant"]: r for r in session_client(operator).get("/api/v1/usage/", Q).json()["rows"]
    }
    assert again["acme"] == rows["acme"] and again["globex"] == rows["globex"]
    every = session_client(operator).get("/api/v1/usage/", {**Q, "format": "csv"}).content.decode()
    assert {"acme", "globex"} <= {r["tenant"] for r in csv.DictReader(io.StringIO(every))}


def test_the_usage_pages(tenant_a, viewer, owner, operator):
    import time as _time

    from django.test import Client

    orders = catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
    meter = Meter(clock=_time.time)
    meter.produced(tenant_a.pk, orders.topic_id, "orders", "User:app", 3_000_000, 10)
    meter.fetched(tenant_a.pk, orders.topic_id, "orders", "User:bi", 1_000_000, 5)
    report = meter.report()
    assert report is not None
    usage.ingest(1, report)
    usage.aggregate()
    member = Client()
    member.force_login(viewer)
    page = member.get("/t/acme/usage/?days=1")
    assert page.status_code == 200
    text = page.content.decode()
    assert "orders" in text and "User:app" in text and "100.0 %" in text
    assert "usage-data" in text  # the chart's data
    assert "format=csv" in text
    assert member.get("/cluster/usage/").status_code == 403
    op = Client()
    op.force_login(operator)
    listing = op.get("/cluster/usage/?days=7").content.decode()
    assert "acme" in listing and "2.9\xa0MB" in listing  # filesizeformat
