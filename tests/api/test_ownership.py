"""Tenant isolation: a user or key of tenant A gets 404 for every object of tenant B.

Every route and method is tried two ways: through B's URL space (``/tenants/globex/...``)
and with B's object ids inside A's URL space (``/tenants/acme/...``). Nothing of B may be
changed by any of these requests.
"""

from __future__ import annotations

import pytest

from control_plane.access import services as access_services
from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Topic
from control_plane.tenancy.models import Membership
from tests.conftest import FULL_ACCESS, SYSTEM, session_client


@pytest.fixture
def b_objects(tenant_b, outsider):
    topic = catalog_services.create_topic(SYSTEM, tenant_b, name="b-topic", partition_count=2)
    sa = access_services.create_service_account(SYSTEM, tenant_b, name="b-sa")
    key = access_services.create_api_key(SYSTEM, sa).api_key
    acl = access_services.create_acl(
        SYSTEM,
        tenant_b,
        principal=sa.principal,
        resource_type="topic",
        pattern_type="literal",
        resource_name="b-topic",
        operation="read",
        permission="allow",
    )
    membership = Membership.objects.get(tenant=tenant_b, user=outsider)
    event = AuditEvent.objects.filter(tenant=tenant_b).first()
    return {
        "topic": topic.name,
        "sa": sa.name,
        "key": key.key_id,
        "acl": acl.pk,
        "member": membership.pk,
        "event": event.pk,
    }


def detail_requests(slug, ids):
    """(method, path, body) for every detail route of every tenant-scoped resource."""
    t = f"/api/v1/tenants/{slug}"
    return [
        ("get", f"{t}/topics/{ids['topic']}/", None),
        ("delete", f"{t}/topics/{ids['topic']}/", None),
        ("get", f"{t}/topics/{ids['topic']}/configs/", None),
        ("patch", f"{t}/topics/{ids['topic']}/configs/", {"retention.ms": 1000}),
        ("get", f"{t}/topics/{ids['topic']}/partitions/", None),
        ("post", f"{t}/topics/{ids['topic']}/partitions/", {"partition_count": 5}),
        ("get", f"{t}/service-accounts/{ids['sa']}/", None),
        ("patch", f"{t}/service-accounts/{ids['sa']}/", {"description": "pwned"}),
        ("delete", f"{t}/service-accounts/{ids['sa']}/", None),
        ("get", f"{t}/api-keys/{ids['key']}/", None),
        ("delete", f"{t}/api-keys/{ids['key']}/", None),
        ("get", f"{t}/acls/{ids['acl']}/", None),
        ("delete", f"{t}/acls/{ids['acl']}/", None),
        ("get", f"{t}/members/{ids['member']}/", None),
        ("patch", f"{t}/members/{ids['member']}/", {"role": "viewer"}),
        ("delete", f"{t}/members/{ids['member']}/", None),
        ("get", f"{t}/audit-events/{ids['event']}/", None),
    ]


def collection_requests(slug):
    t = f"/api/v1/tenants/{slug}"
    return [
        ("get", f"/api/v1/tenants/{slug}/", None),
        ("patch", f"/api/v1/tenants/{slug}/", {"name": "pwned"}),
        ("get", f"{t}/topics/", None),
        ("post", f"{t}/topics/", {"name": "intruder", "partition_count": 1}),
        ("get", f"{t}/service-accounts/", None),
        ("post", f"{t}/service-accounts/", {"name": "intruder"}),
        ("get", f"{t}/api-keys/", None),
        ("post", f"{t}/api-keys/", {"service_account": "b-sa"}),
        ("get", f"{t}/acls/", None),
        (
            "post",
            f"{t}/acls/",
            {
                "principal": "User:*",
                "resource_type": "topic",
                "resource_name": "*",
                "operation": "all",
            },
        ),
        ("get", f"{t}/members/", None),
        ("post", f"{t}/members/", {"username": "olivia", "role": "owner"}),
        ("get", f"{t}/audit-events/", None),
        ("get", f"{t}/client-quotas/", None),
    ]


def snapshot_b(tenant_b):
    return (
        list(Topic.objects.filter(tenant=tenant_b).values()),
        list(ServiceAccount.objects.filter(tenant=tenant_b).values()),
        list(ApiKey.objects.filter(tenant=tenant_b).values("key_id", "revoked_at")),
        list(Acl.objects.filter(tenant=tenant_b).values()),
        list(Membership.objects.filter(tenant=tenant_b).values()),
        AuditEvent.objects.filter(tenant=tenant_b).count(),
        tenant_b.__class__.objects.filter(pk=tenant_b.pk).values("name").get(),
    )


@pytest.fixture(params=["owner-session", "full-access-key"])
def a_client(request, tenant_a, owner, make_key):
    if request.param == "owner-session":
        return session_client(owner)
    client, _, _ = make_key(tenant_a, FULL_ACCESS)
    return client


def _send(client, method, path, body):
    return (
        getattr(client, method)(path, body, format="json")
        if body
        else getattr(client, method)(path)
    )


def test_b_urls_are_404_for_a(a_client, tenant_b, b_objects):
    before = snapshot_b(tenant_b)
    for method, path, body in [
        *collection_requests("globex"),
        *detail_requests("globex", b_objects),
    ]:
        response = _send(a_client, method, path, body)
        assert response.status_code == 404, (method, path, response.status_code, response.content)
        assert response.json()["error"]["code"] == "not_found"
    assert snapshot_b(tenant_b) == before


def test_b_ids_inside_a_urls_are_404(a_client, tenant_b, b_objects):
    before = snapshot_b(tenant_b)
    for method, path, body in detail_requests("acme", b_objects):
        response = _send(a_client, method, path, body)
        assert response.status_code == 404, (method, path, response.status_code, response.content)
    assert snapshot_b(tenant_b) == before


def test_unknown_tenant_and_b_tenant_look_the_same(a_client, tenant_b):
    missing = a_client.get("/api/v1/tenants/no-such-tenant/topics/")
    other = a_client.get("/api/v1/tenants/globex/topics/")
    assert missing.status_code == other.status_code == 404
    assert missing.json()["error"]["code"] == other.json()["error"]["code"]


def test_lists_never_show_b(a_client, tenant_a, tenant_b, b_objects):
    catalog_services.create_topic(SYSTEM, tenant_a, name="a-topic", partition_count=1)
    tenants = a_client.get("/api/v1/tenants/").json()["results"]
    assert [t["slug"] for t in tenants] == ["acme"]
    topics = a_client.get("/api/v1/tenants/acme/topics/").json()["results"]
    assert [t["name"] for t in topics] == ["a-topic"]
    keys = a_client.get("/api/v1/tenants/acme/api-keys/").json()["results"]
    assert b_objects["key"] not in {k["key_id"] for k in keys}
    events = a_client.get("/api/v1/tenants/acme/audit-events/")
    if events.status_code == 200:
        assert all(e["object_repr"] != "b-topic" for e in events.json()["results"])


def test_key_of_a_cannot_reference_b_principal(tenant_a, tenant_b, b_objects, make_key):
    client, _, _ = make_key(tenant_a, FULL_ACCESS)
    response = client.post(
        "/api/v1/tenants/acme/acls/",
        {
            "principal": "User:b-sa",
            "resource_type": "topic",
            "resource_name": "*",
            "operation": "all",
        },
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"principal": ["no service account named 'b-sa'"]}
