"""Plans: operators define them and move tenants between them; a tenant on a plan has its
limits (what brokers are told included); changing a plan changes its tenants; the
retention ceiling on topics; people's own tenants get the default plan; the console's
pages. The brokers' side is tests/broker/test_plan_limits.py and the plan test in
tests/broker/test_connection_limits.py."""

from __future__ import annotations

import pytest
from django.test import Client

from control_plane.audit.models import AuditEvent
from control_plane.brokerlink.metadata import tenant_info
from control_plane.catalog import services as catalog_services
from control_plane.core.actor import Actor
from control_plane.core.errors import InvalidInput
from control_plane.core.models import MetadataChange
from control_plane.tenancy import plans
from control_plane.tenancy.models import Plan, Tenant
from control_plane.tenancy.services import create_own_tenant, create_tenant, update_tenant
from tests.conftest import SYSTEM, session_client

T = "/api/v1/tenants/acme"
SMALL = {
    "max_partitions": 10,
    "max_storage_bytes": 2**30,
    "produce_byte_rate": 2**20,
    "fetch_byte_rate": 2 * 2**20,
    "max_connections": 20,
    "max_retention_ms": 86_400_000,
    "max_connectors": 1,
    "max_connector_tasks": 2,
}


def _plan(slug="small", **overrides):
    return plans.create_plan(SYSTEM, slug=slug, name=slug.title(), limits={**SMALL, **overrides})


def test_only_operators_define_plans_and_everyone_signed_in_reads_them(
    owner, operator, tenant_a, make_key
):
    body = {"slug": "small", "name": "Small", **SMALL}
    assert session_client(owner).post("/api/v1/plans/", body, format="json").status_code == 403
    keyed, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "all")])
    assert keyed.post("/api/v1/plans/", body, format="json").status_code == 403
    missing = session_client(operator).post(
        "/api/v1/plans/", {k: v for k, v in body.items() if k != "max_connections"}, format="json"
    )
    assert missing.status_code == 400 and "max_connections" in missing.json()["error"]["details"]
    zero = session_client(operator).post(
        "/api/v1/plans/", {**body, "max_partitions": 0}, format="json"
    )
    assert zero.status_code == 400
    assert not Plan.objects.filter(slug="small").exists()  # nothing half made
    made = session_client(operator).post("/api/v1/plans/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["tenants"] == 0 and made.json()["max_retention_ms"] == 86_400_000
    again = session_client(operator).post("/api/v1/plans/", body, format="json")
    assert again.status_code == 400 and again.json()["error"]["code"] == "already_exists"
    listed = session_client(owner).get("/api/v1/plans/").json()["results"]
    assert [p["slug"] for p in listed] == ["small"]
    assert (
        session_client(owner)
        .patch("/api/v1/plans/small/", {"name": "x"}, format="json")
        .status_code
        == 403
    )
    assert session_client(owner).delete("/api/v1/plans/small/").status_code == 403
    assert AuditEvent.objects.filter(action="plan.create", object_repr="small").count() == 1


def test_moving_a_tenant_to_a_plan_copies_its_limits_and_tells_the_brokers(
    owner, operator, tenant_a
):
    _plan()
    assert session_client(owner).patch(T + "/", {"plan": "small"}, format="json").status_code == 403
    unknown = session_client(operator).patch(T + "/", {"plan": "nope"}, format="json")
    assert unknown.status_code == 400 and "plan" in unknown.json()["error"]["details"]
    version = MetadataChange.objects.filter(tenant_id=tenant_a.pk).count()
    moved = session_client(operator).patch(T + "/", {"plan": "small"}, format="json")
    assert moved.status_code == 200, moved.content
    data = moved.json()
    assert data["plan"] == "small"
    assert {k: data[k] for k in SMALL} == SMALL
    assert MetadataChange.objects.filter(tenant_id=tenant_a.pk).count() > version
    info = tenant_info(Tenant.objects.prefetch_related("client_quotas").get(pk=tenant_a.pk))
    assert (info.max_connections, info.max_retention_ms) == (20, 86_400_000)
    assert (info.produce_byte_rate, info.max_partitions) == (2**20, 10)
    # Setting one limit by hand makes the tenant's limits its own.
    own = session_client(operator).patch(T + "/", {"max_partitions": 11}, format="json").json()
    assert own["plan"] is None and own["max_partitions"] == 11
    # The owner sees the plan in the console.
    session_client(operator).patch(T + "/", {"plan": "small"}, format="json")
    console = Client()
    console.force_login(owner)
    page = console.get("/t/acme/settings/")
    assert b"Small" in page.content and b"24 hours" in page.content


def test_changing_a_plan_changes_every_tenant_on_it(operator, tenant_a, tenant_b):
    plan = _plan()
    other = _plan("big", max_partitions=500)
    for tenant, chosen in ((tenant_a, plan), (tenant_b, other)):
        update_tenant(SYSTEM, tenant, plan=chosen)
    response = session_client(operator).patch(
        "/api/v1/plans/small/", {"max_partitions": 40, "max_retention_ms": None}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["tenants"] == 1
    a, b = (Tenant.objects.get(pk=t.pk) for t in (tenant_a, tenant_b))
    assert (a.max_partitions, a.max_retention_ms) == (40, None)
    assert b.max_partitions == 500  # another plan's tenant is untouched
    changes = AuditEvent.objects.filter(tenant=tenant_a, action="tenant.update", actor="root-op")
    assert changes.count() == 1 and changes.get().after["max_partitions"] == 40
    event = AuditEvent.objects.get(action="plan.update", object_repr="small")
    assert event.after["tenants_changed"] == 1
    # A plan with tenants is not deleted; an empty one is.
    assert session_client(operator).delete("/api/v1/plans/small/").status_code == 409
    Tenant.objects.filter(pk=tenant_a.pk).update(plan=None)
    assert session_client(operator).delete("/api/v1/plans/small/").status_code == 204


def test_one_default_plan_and_peoples_own_tenants_get_it(tenant_a, settings):
    first = plans.create_plan(SYSTEM, slug="free", name="Free", limits=SMALL, is_default=True)
    second = plans.create_plan(
        SYSTEM, slug="trial", name="Trial", limits={**SMALL, "max_partitions": 3}, is_default=True
    )
    first.refresh_from_db()
    assert not first.is_default and second.is_default
    from tests.conftest import make_user

    person = make_user("pat")
    person.email = "pat@example.com"
    person.save()
    tenant = _own_tenant(person)
    assert tenant.plan == second and tenant.max_partitions == 3
    # Operators creating a tenant with limits of their own get no plan.
    custom = create_tenant(SYSTEM, slug="custom", name="Custom", limits={"max_partitions": 7})
    assert custom.plan is None and custom.max_partitions == 7


def _own_tenant(person):
    return create_own_tenant(Actor(user=person), slug="pats", name="Pat's")


def test_topics_keep_within_the_retention_ceiling(tenant_a):
    plan = _plan(max_retention_ms=3_600_000)
    Tenant.objects.filter(pk=tenant_a.pk).update(plan=plan, max_retention_ms=3_600_000)
    tenant = Tenant.objects.get(pk=tenant_a.pk)
    for value, allowed in ((-1, False), (3_600_001, False), (3_600_000, True), (60_000, True)):
        name = f"t{abs(value)}"
        if allowed:
            catalog_services.create_topic(
                SYSTEM, tenant, name=name, partition_count=1, configs={"retention.ms": value}
            )
        else:
            with pytest.raises(InvalidInput, match="at most 3600000") as err:
                catalog_services.create_topic(
                    SYSTEM, tenant, name=name, partition_count=1, configs={"retention.ms": value}
                )
            assert err.value.field == "configs.retention.ms"
    # No retention.ms: the default, which brokers cap at the ceiling.
    plain = catalog_services.create_topic(SYSTEM, tenant, name="plain", partition_count=1)
    with pytest.raises(InvalidInput):
        catalog_services.alter_topic_configs(SYSTEM, plain, {"retention.ms": -1})
    # A topic made before a lower ceiling may still change its other configs.
    Tenant.objects.filter(pk=tenant_a.pk).update(max_retention_ms=None)
    old = catalog_services.create_topic(
        Actor.system(),
        Tenant.objects.get(pk=tenant_a.pk),
        name="old",
        partition_count=1,
        configs={"retention.ms": -1},
    )
    Tenant.objects.filter(pk=tenant_a.pk).update(max_retention_ms=3_600_000)
    old.refresh_from_db()
    catalog_services.alter_topic_configs(SYSTEM, old, {"segment.ms": 3_600_000})


def test_the_operators_plan_pages(owner, operator, tenant_a):
    member = Client()
    member.force_login(owner)
    assert member.get("/cluster/plans/").status_code == 403
    op = Client()
    op.force_login(operator)
    assert op.get("/cluster/plans/").status_code == 200
    form = {
        "slug": "team",
        "name": "Team",
        "max_partitions": "100",
        "storage_gib": "50",
        "produce_mib": "10",
        "fetch_mib": "20",
        "max_connections": "200",
        "retention_hours": "168",
        "max_connectors": "5",
        "max_connector_tasks": "10",
    }
    bad = op.post("/cluster/plans/", {**form, "produce_mib": "lots"})
    assert bad.status_code == 400 and b"Produce rate (MiB/s): a number" in bad.content
    assert op.post("/cluster/plans/", form).status_code == 302
    plan = Plan.objects.get(slug="team")
    assert plan.max_storage_bytes == 50 * 2**30 and plan.produce_byte_rate == 10 * 2**20
    assert plan.max_retention_ms == 168 * 3_600_000
    assert op.post(f"/cluster/tenants/{tenant_a.slug}/plan/", {"plan": "team"}).status_code == 302
    assert Tenant.objects.get(pk=tenant_a.pk).max_connections == 200
    edit = op.post(
        "/cluster/plans/team/", {**form, "max_connections": "300", "retention_hours": ""}
    )
    assert edit.status_code == 302
    tenant = Tenant.objects.get(pk=tenant_a.pk)
    assert tenant.max_connections == 300 and tenant.max_retention_ms is None
    page = op.get("/cluster/plans/team/")
    assert b"acme" in page.content and b"Delete plan" not in page.content
    listing = op.get("/cluster/tenants/")
    assert b'option value="team" selected' in listing.content
