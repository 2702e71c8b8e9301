"""The role matrix for users, and ACL-driven access for API keys (docs/api.md)."""

from __future__ import annotations

import pytest

from control_plane.access import services as access_services
from control_plane.catalog import services as catalog_services
from control_plane.tenancy.models import Tenant
from tests.conftest import SYSTEM, session_client

T = "/api/v1/tenants/acme"

# (method, path, body, minimum role)
MUTATIONS = [
    ("post", f"{T}/topics/", {"name": "new-topic", "partition_count": 1}, "developer"),
    ("patch", f"{T}/topics/orders/configs/", {"retention.ms": 60000}, "developer"),
    ("post", f"{T}/topics/orders/partitions/", {"partition_count": 3}, "developer"),
    ("delete", f"{T}/topics/orders/", None, "developer"),
    ("post", f"{T}/service-accounts/", {"name": "new-sa"}, "admin"),
    ("patch", f"{T}/service-accounts/app/", {"description": "x"}, "admin"),
    ("post", f"{T}/api-keys/", {"service_account": "app"}, "admin"),
    (
        "post",
        f"{T}/acls/",
        {
            "principal": "User:app",
            "resource_type": "topic",
            "resource_name": "orders",
            "operation": "read",
        },
        "admin",
    ),
    ("post", f"{T}/members/", {"username": "newbie", "role": "viewer"}, "admin"),
    ("post", f"{T}/invitations/", {"email": "new@example.com", "role": "viewer"}, "admin"),
    ("delete", f"{T}/service-accounts/app/", None, "admin"),
    (
        "post",
        f"{T}/alert-rules/",
        {"name": "lag", "kind": "consumer_lag", "threshold": 5, "emails": ["a@example.com"]},
        "admin",
    ),
    ("delete", f"{T}/", {"confirm": "acme"}, "owner"),
]
READS = [
    (f"{T}/topics/", "viewer"),
    (f"{T}/topics/orders/", "viewer"),
    (f"{T}/topics/orders/configs/", "viewer"),
    (f"{T}/topics/orders/partitions/", "viewer"),
    (f"{T}/service-accounts/", "viewer"),
    (f"{T}/api-keys/", "viewer"),
    (f"{T}/acls/", "viewer"),
    (f"{T}/members/", "viewer"),
    (f"{T}/audit-events/", "admin"),
    (f"{T}/invitations/", "admin"),
    (f"{T}/client-quotas/", "viewer"),
    (f"{T}/usage/", "viewer"),
    (f"{T}/alert-rules/", "viewer"),
]
RANK = ["viewer", "developer", "admin", "owner"]


@pytest.fixture
def world(tenant_a, owner, admin_user, developer, viewer):
    from tests.conftest import make_user

    make_user("newbie")
    catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
    access_services.create_service_account(SYSTEM, tenant_a, name="app")
    return {"owner": owner, "admin": admin_user, "developer": developer, "viewer": viewer}


@pytest.mark.parametrize("role", RANK)
@pytest.mark.parametrize(("method", "path", "body", "minimum"), MUTATIONS)
def test_mutation_needs_role(world, role, method, path, body, minimum):
    client = session_client(world[role])
    response = getattr(client, method)(path, body, format="json")
    if RANK.index(role) >= RANK.index(minimum):
        # 202: a tenant admin's add answers the same whether or not the account exists.
        assert response.status_code in (200, 201, 202, 204), response.content
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "permission_denied"


@pytest.mark.parametrize("role", RANK)
@pytest.mark.parametrize(("path", "minimum"), READS)
def test_read_needs_role(world, role, path, minimum):
    response = session_client(world[role]).get(path)
    expected = 200 if RANK.index(role) >= RANK.index(minimum) else 403
    assert response.status_code == expected, response.content


def test_admin_cannot_grant_or_touch_owner(world, tenant_a):
    admin = session_client(world["admin"])
    grant = admin.post(f"{T}/members/", {"username": "newbie", "role": "owner"}, format="json")
    assert grant.status_code == 403
    owner_id = tenant_a.memberships.get(user=world["owner"]).pk
    assert (
        admin.patch(f"{T}/members/{owner_id}/", {"role": "viewer"}, format="json").status_code
        == 403
    )
    assert admin.delete(f"{T}/members/{owner_id}/").status_code == 403
    owner = session_client(world["owner"])
    assert (
        owner.post(
            f"{T}/members/", {"username": "newbie", "role": "owner"}, format="json"
        ).status_code
        == 202
    )


def test_last_owner_cannot_leave_or_be_demoted(world, tenant_a):
    owner = session_client(world["owner"])
    owner_id = tenant_a.memberships.get(user=world["owner"]).pk
    response = owner.patch(f"{T}/members/{owner_id}/", {"role": "admin"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "role": ["a tenant must keep at least one owner"]
    }
    assert owner.delete(f"{T}/members/{owner_id}/").status_code == 400


def test_only_owner_renames_and_only_staff_changes_limits(world, operator, tenant_a):
    assert (
        session_client(world["admin"]).patch(f"{T}/", {"name": "New"}, format="json").status_code
        == 403
    )
    response = session_client(world["owner"]).patch(f"{T}/", {"name": "Acme Inc"}, format="json")
    assert response.status_code == 200 and response.json()["name"] == "Acme Inc"
    assert (
        session_client(world["owner"])
        .patch(f"{T}/", {"max_partitions": 99999}, format="json")
        .status_code
        == 403
    )
    # Operators manage tenants without being members.
    response = session_client(operator).patch(f"{T}/", {"max_partitions": 5}, format="json")
    assert response.status_code == 200 and response.json()["max_partitions"] == 5


def test_operators_set_a_tenants_num_partitions(world, operator, tenant_a):
    op = session_client(operator)
    assert (
        session_client(world["owner"])
        .patch(f"{T}/", {"default_partitions": 3}, format="json")
        .status_code
        == 403
    )
    response = op.patch(f"{T}/", {"default_partitions": 3}, format="json")
    assert response.status_code == 200 and response.json()["default_partitions"] == 3
    too_many = op.patch(f"{T}/", {"default_partitions": tenant_a.max_partitions + 1}, format="json")
    assert too_many.status_code == 400
    assert "default_partitions" in too_many.json()["error"]["details"]
    tenant_a.refresh_from_db()
    assert tenant_a.default_partitions == 3  # the refused change left nothing behind
    response = op.patch(f"{T}/", {"default_partitions": None}, format="json")
    assert response.status_code == 200 and response.json()["default_partitions"] is None


def test_tenant_patch_by_non_owner_is_refused_and_noop_writes_nothing(world, operator):
    from control_plane.audit.models import AuditEvent

    before = AuditEvent.objects.count()
    for role in ("viewer", "developer", "admin"):
        response = session_client(world[role]).patch(f"{T}/", {}, format="json")
        assert response.status_code == 403
    assert session_client(world["owner"]).patch(f"{T}/", {}, format="json").status_code == 200
    assert (
        session_client(world["owner"]).patch(f"{T}/", {"name": "Acme"}, format="json").status_code
        == 200
    )  # same name: no change
    assert AuditEvent.objects.count() == before


def test_system_actor_may_rename(tenant_a):
    from control_plane.tenancy.services import update_tenant

    assert update_tenant(SYSTEM, tenant_a, name="Renamed").name == "Renamed"


def test_tenant_create_does_not_reveal_usernames_to_non_staff(world):
    for owner_name in ("olivia", "no-such-user"):
        response = session_client(world["owner"]).post(
            "/api/v1/tenants/", {"slug": "x", "name": "X", "owner": owner_name}, format="json"
        )
        assert response.status_code == 403


def test_operators_create_any_tenant_and_people_their_own(world, operator, tenant_a, make_key):
    body = {"slug": "initech", "name": "Initech"}
    person = session_client(world["developer"])
    # Only operators name another owner or set limits.
    for extra in ({"owner": "olivia"}, {"max_partitions": 5}):
        response = person.post("/api/v1/tenants/", {**body, **extra}, format="json")
        assert response.status_code == 403, response.content
    keyed, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "all")])
    assert keyed.post("/api/v1/tenants/", body, format="json").status_code == 403
    assert not Tenant.objects.filter(slug="initech").exists()
    # A person (here made by an operator: vouched for) creates one and owns it.
    response = person.post("/api/v1/tenants/", body, format="json")
    assert response.status_code == 201 and response.json()["role"] == "owner"
    response = session_client(operator).post(
        "/api/v1/tenants/", {"slug": "hooli", "name": "Hooli", "max_partitions": 5}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["role"] == "owner"  # the creating operator becomes its owner


# --- API keys: what the ACLs allow, nothing more ------------------------------------------


def test_key_without_acls_is_denied_everything(world, tenant_a, make_key):
    client, _, _ = make_key(tenant_a)
    assert client.get(f"{T}/topics/").json()["results"] == []
    for method, path, body, _ in MUTATIONS:
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code == 403, (method, path, response.content)
    assert client.get(f"{T}/topics/orders/").status_code == 403
    assert client.get(f"{T}/service-accounts/").status_code == 403
    assert client.get(f"{T}/members/").status_code == 403


def test_key_topic_acls(world, tenant_a, make_key):
    catalog_services.create_topic(SYSTEM, tenant_a, name="payments", partition_count=1)
    client, _, _ = make_key(
        tenant_a,
        [
            ("topic", "prefixed", "ord", "describe_configs"),
            ("topic", "literal", "orders", "read"),
            ("topic", "prefixed", "team-", "create"),
            ("topic", "prefixed", "team-", "alter_configs"),
        ],
    )
    assert [t["name"] for t in client.get(f"{T}/topics/").json()["results"]] == ["orders"]
    assert client.get(f"{T}/topics/orders/configs/").status_code == 200
    assert client.get(f"{T}/topics/payments/").status_code == 403
    assert (
        client.patch(
            f"{T}/topics/orders/configs/", {"retention.ms": 60000}, format="json"
        ).status_code
        == 403
    )
    assert (
        client.post(
            f"{T}/topics/", {"name": "other", "partition_count": 1}, format="json"
        ).status_code
        == 403
    )
    created = client.post(f"{T}/topics/", {"name": "team-x", "partition_count": 1}, format="json")
    assert created.status_code == 201
    assert (
        client.patch(
            f"{T}/topics/team-x/configs/", {"retention.ms": 60000}, format="json"
        ).status_code
        == 200
    )
    assert client.delete(f"{T}/topics/team-x/").status_code == 403


def test_key_cluster_acls_manage_access(world, tenant_a, make_key):
    reader, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "describe")])
    assert reader.get(f"{T}/service-accounts/").status_code == 200
    assert reader.post(f"{T}/service-accounts/", {"name": "x"}, format="json").status_code == 403
    writer, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "alter")])
    assert writer.post(f"{T}/service-accounts/", {"name": "x"}, format="json").status_code == 201
    assert writer.get(f"{T}/members/").status_code == 403  # members are for people


def test_deny_acl_beats_wildcard_allow(world, tenant_a, make_key):
    client, _, _ = make_key(tenant_a, [("topic", "literal", "*", "all")], name="svc")
    access_services.create_acl(
        SYSTEM,
        tenant_a,
        principal="User:*",
        resource_type="topic",
        pattern_type="literal",
        resource_name="orders",
        operation="all",
        permission="deny",
    )
    assert client.get(f"{T}/topics/orders/").status_code == 403
    assert client.get(f"{T}/topics/").json()["results"] == []
