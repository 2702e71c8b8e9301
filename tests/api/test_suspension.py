"""Suspending and resuming a tenant: operators only, over REST and in the console; what
brokers are told (the tenant's metadata); the banner members see. The brokers' side,
with real clients, is tests/broker/test_suspension.py."""

from __future__ import annotations

from django.test import Client
from django.utils import timezone

from control_plane.audit.models import AuditEvent
from control_plane.brokerlink.metadata import tenant_info
from control_plane.tenancy.models import Tenant
from tests.conftest import session_client

T = "/api/v1/tenants/acme"


def test_only_operators_suspend_and_resume(owner, operator, tenant_a, make_key):
    body = {"reason": "unpaid invoice", "read_grace_seconds": 3600}
    assert session_client(owner).post(f"{T}/suspend/", body, format="json").status_code == 403
    keyed, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "all")])
    assert keyed.post(f"{T}/suspend/", body, format="json").status_code == 403
    bad = session_client(operator).post(f"{T}/suspend/", {"read_grace_seconds": -1}, format="json")
    assert bad.status_code == 400 and Tenant.objects.get(pk=tenant_a.pk).suspended_at is None
    response = session_client(operator).post(f"{T}/suspend/", body, format="json")
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["suspended_at"] and data["suspension_reason"] == "unpaid invoice"
    tenant = Tenant.objects.get(pk=tenant_a.pk)
    info = tenant_info(Tenant.objects.prefetch_related("client_quotas").get(pk=tenant.pk))
    assert info.suspension() == "tenant 'acme' is suspended: unpaid invoice"
    now_ms = int(timezone.now().timestamp() * 1000)
    assert not info.reads_over(now_ms) and info.reads_over(now_ms + 3601 * 1000)
    assert session_client(owner).post(f"{T}/resume/").status_code == 403
    resumed = session_client(operator).post(f"{T}/resume/")
    assert resumed.status_code == 200 and resumed.json()["suspended_at"] is None
    info = tenant_info(Tenant.objects.prefetch_related("client_quotas").get(pk=tenant.pk))
    assert info.suspension() is None and not info.reads_over(now_ms)
    actions = list(
        AuditEvent.objects.filter(tenant=tenant_a, action__startswith="tenant.s").values_list(
            "action", flat=True
        )
    )
    assert actions == ["tenant.suspend"]
    assert AuditEvent.objects.filter(tenant=tenant_a, action="tenant.resume").count() == 1


def test_the_operators_tenants_page(owner, operator, tenant_a):
    member = Client()
    member.force_login(owner)
    assert member.get("/cluster/tenants/").status_code == 403
    assert member.post(f"/cluster/tenants/{tenant_a.slug}/suspend/").status_code == 403
    op = Client()
    op.force_login(operator)
    page = op.get("/cluster/tenants/")
    assert page.status_code == 200 and b"acme" in page.content
    op.post(
        f"/cluster/tenants/{tenant_a.slug}/suspend/",
        {"reason": "abuse report", "read_grace_hours": "1"},
    )
    assert Tenant.objects.get(pk=tenant_a.pk).suspension_reason == "abuse report"
    banner = member.get(f"/t/{tenant_a.slug}/").content.decode()
    assert "This tenant is suspended (abuse report)" in banner
    op.post(f"/cluster/tenants/{tenant_a.slug}/resume/")
    assert Tenant.objects.get(pk=tenant_a.pk).suspended_at is None
    assert "is suspended" not in member.get(f"/t/{tenant_a.slug}/").content.decode()
