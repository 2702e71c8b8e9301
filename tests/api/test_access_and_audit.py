"""Members, ACLs, the audit trail, session login and the error body."""

from __future__ import annotations

import secrets

import pytest
from rest_framework.test import APIClient

from control_plane.access.models import Acl
from control_plane.audit.models import AuditEvent
from tests.conftest import basic_auth, make_user, session_client

T = "/api/v1/tenants/acme"


def test_member_lifecycle(owner):
    make_user("bob")
    client = session_client(owner)
    created = client.post(f"{T}/members/", {"username": "bob", "role": "developer"}, format="json")
    # A tenant admin is told the same for a new member, an existing one and no account.
    dup = client.post(f"{T}/members/", {"username": "bob", "role": "viewer"}, format="json")
    missing = client.post(f"{T}/members/", {"username": "ghost", "role": "viewer"}, format="json")
    assert created.status_code == dup.status_code == missing.status_code == 202
    assert created.json() == dup.json() == missing.json()
    members = {m["username"]: m for m in client.get(f"{T}/members/").json()["results"]}
    assert members["bob"]["role"] == "developer" and "ghost" not in members
    assert members["bob"]["email"] is None  # another member's address is not shown
    member_id = members["bob"]["id"]
    bad_role = client.post(f"{T}/members/", {"username": "bob", "role": "god"}, format="json")
    assert "role" in bad_role.json()["error"]["details"]
    assert (
        client.patch(f"{T}/members/{member_id}/", {"role": "admin"}, format="json").json()["role"]
        == "admin"
    )
    assert client.delete(f"{T}/members/{member_id}/").status_code == 204
    actions = list(
        AuditEvent.objects.filter(object_type="membership", object_repr="bob")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["member.add", "member.change_role", "member.remove"]


def test_acl_create_validate_list_delete(owner):
    client = session_client(owner)
    client.post(f"{T}/service-accounts/", {"name": "app"}, format="json")
    body = {
        "principal": "User:app",
        "resource_type": "topic",
        "pattern_type": "prefixed",
        "resource_name": "orders-",
        "operation": "write",
    }
    created = client.post(f"{T}/acls/", body, format="json")
    assert created.status_code == 201, created.content
    acl = created.json()
    assert acl["permission"] == "allow" and acl["host"] == "*"
    again = client.post(f"{T}/acls/", body, format="json")
    assert again.json()["error"]["code"] == "already_exists"
    wildcard = {**body, "principal": "User:*", "permission": "deny", "host": "10.1.2.3"}
    assert client.post(f"{T}/acls/", wildcard, format="json").status_code == 201
    assert client.post(f"{T}/acls/", wildcard, format="json").status_code == 400
    listed = client.get(f"{T}/acls/?principal=User:*").json()["results"]
    assert [a["permission"] for a in listed] == ["deny"]
    assert len(client.get(f"{T}/acls/?operation=write").json()["results"]) == 2
    assert client.delete(f"{T}/acls/{acl['id']}/").status_code == 204
    assert Acl.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"principal": "app"}, "principal"),
        ({"principal": "User:nobody"}, "principal"),
        ({"resource_type": "database"}, "resource_type"),
        ({"operation": "fly"}, "operation"),
        ({"resource_type": "group", "operation": "write"}, "operation"),
        (
            {"resource_type": "cluster", "resource_name": "other", "operation": "alter"},
            "resource_name",
        ),
        ({"host": "not-an-ip"}, "host"),
        ({"pattern_type": "regex"}, "pattern_type"),
    ],
)
def test_bad_acls_are_400_and_write_nothing(owner, change, field):
    client = session_client(owner)
    client.post(f"{T}/service-accounts/", {"name": "app"}, format="json")
    body = {
        "principal": "User:app",
        "resource_type": "topic",
        "resource_name": "orders",
        "operation": "read",
        **change,
    }
    response = client.post(f"{T}/acls/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not Acl.objects.exists()


def test_audit_event_records_actor_object_before_after_and_ip(owner):
    client = session_client(owner)
    client.post(
        f"{T}/topics/",
        {"name": "t", "partition_count": 1},
        format="json",
        REMOTE_ADDR="203.0.113.9",
    )
    client.patch(f"{T}/topics/t/configs/", {"retention.ms": 60000}, format="json")
    events = client.get(f"{T}/audit-events/?object_type=topic").json()["results"]
    alter, create = events
    assert create["action"] == "topic.create" and create["actor"] == "olivia"
    assert create["actor_type"] == "user" and create["source_ip"] == "203.0.113.9"
    assert create["before"] is None and create["after"]["partition_count"] == 1
    assert alter["before"]["configs"] == {} and alter["after"]["configs"] == {"retention.ms": 60000}
    assert client.get(f"{T}/audit-events/?action=topic.create").json()["count"] == 1
    assert client.get(f"{T}/audit-events/?since=2999-01-01T00:00:00Z").json()["count"] == 0


def test_audit_records_api_key_actor(tenant_a, make_key):
    client, key, _ = make_key(tenant_a, [("topic", "literal", "*", "all")])
    client.post(f"{T}/topics/", {"name": "k", "partition_count": 1}, format="json")
    event = AuditEvent.objects.get(action="topic.create", tenant=tenant_a)
    assert event.actor == key.key_id and event.actor_type == "api_key"


def test_session_login_logout_and_rate_limit(settings, owner):
    client = APIClient(REMOTE_ADDR=f"2001:db8::{secrets.token_hex(2)}")
    me = client.post(
        "/api/v1/auth/login/", {"username": "olivia", "password": "olivia-pw-123!"}, format="json"
    )
    assert me.status_code == 200
    assert me.json()["tenants"] == [{"slug": "acme", "role": "owner"}]
    assert client.get("/api/v1/auth/me/").json()["username"] == "olivia"
    assert client.post("/api/v1/auth/logout/").status_code == 204
    assert client.get("/api/v1/auth/me/").status_code in (401, 403)
    settings.MILLRACE_AUTH_FAILURES_PER_MINUTE = 2
    codes = [
        client.post(
            "/api/v1/auth/login/", {"username": "olivia", "password": "nope"}, format="json"
        ).status_code
        for _ in range(3)
    ]
    assert codes == [401, 401, 429]


def test_session_requires_csrf_for_writes(owner):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.post(f"{T}/topics/", {"name": "t", "partition_count": 1}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("get", "/api/v1/nope/", 404, "not_found"),
        ("get", f"{T}/topics/", 401, "not_authenticated"),
        ("put", "/api/v1/tenants/acme/", 401, "not_authenticated"),
    ],
)
def test_error_body_shape(db, method, path, status, code):
    response = getattr(APIClient(), method)(path)
    assert response.status_code == status
    assert set(response.json()["error"]) == {"code", "message", "details"}
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_a_mistyped_api_path_is_not_found_whatever_the_method(tenant_a, make_key, method):
    # With a key and Django's CSRF checks on, as a real client meets them: JSON not_found,
    # not the HTML "CSRF verification failed" page.
    _, key, secret = make_key(tenant_a, [("topic", "literal", "*", "all")])
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=basic_auth(key.key_id, secret))
    response = getattr(client, method)("/api/v1/tenants/acme/topicz/", {}, format="json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_method_not_allowed_and_malformed_json(owner):
    client = session_client(owner)
    response = client.put(f"{T}/topics/x/", {}, format="json")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    response = client.post(f"{T}/topics/", "{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "parse_error"


def test_services_enforce_lengths_and_hosts_for_every_caller(owner, tenant_a):
    """The console and the Kafka protocol call the services without DRF's serializers in
    front, so the services check what the columns and the authorizer need themselves."""
    from control_plane.access import services as access_services
    from control_plane.core.errors import InvalidInput
    from tests.conftest import SYSTEM

    sa = access_services.create_service_account(SYSTEM, tenant_a, name="app")
    with pytest.raises(InvalidInput, match="at most 200") as exc:
        access_services.create_api_key(SYSTEM, sa, description="x" * 201)
    assert exc.value.field == "description"
    acl = {
        "principal": "User:app",
        "resource_type": "topic",
        "pattern_type": "literal",
        "operation": "read",
        "permission": "allow",
    }
    with pytest.raises(InvalidInput, match="at most 255") as exc:
        access_services.create_acl(SYSTEM, tenant_a, **acl, resource_name="t" * 256)
    assert exc.value.field == "resource_name"
    with pytest.raises(InvalidInput, match="one IP address") as exc:
        access_services.create_acl(SYSTEM, tenant_a, **acl, resource_name="t", host="db.local")
    assert exc.value.field == "host"
    assert not Acl.objects.exists()
    made = access_services.create_acl(SYSTEM, tenant_a, **acl, resource_name="t", host="::0001")
    assert made.host == "::1"  # one spelling per address
    assert access_services.create_acl(SYSTEM, tenant_a, **acl, resource_name="u").host == "*"
