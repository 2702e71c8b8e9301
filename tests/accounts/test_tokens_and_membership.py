"""Personal API tokens (the REST API as a person, from scripts), ownership transfer and
leaving a tenant: over REST and in the console."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from control_plane.accounts.models import PersonalToken
from control_plane.audit.models import AuditEvent
from control_plane.tenancy.models import Membership, Role
from tests.conftest import session_client

pytestmark = pytest.mark.django_db
T = "/api/v1/tenants/acme"


def bearer(token: str) -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def make_token(user, **body) -> dict:
    response = session_client(user).post(
        "/api/v1/auth/tokens/", {"name": "ci", **body}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response["Cache-Control"] == "no-store"
    return response.json()


def test_a_token_acts_as_its_person_with_their_roles(owner, developer, tenant_a, outsider):
    made = make_token(developer, expires_in_days=30)
    token = made["token"]
    assert token.startswith("mrpat_") and made["state"] == "active"
    assert "secret_hash" not in made
    client = bearer(token)  # no session, no CSRF token: none needed
    assert [t["slug"] for t in client.get("/api/v1/tenants/").json()["results"]] == ["acme"]
    created = client.post(f"{T}/topics/", {"name": "from-ci", "partition_count": 1}, format="json")
    assert created.status_code in (201, 400), created.content  # a developer may create topics
    assert client.post(f"{T}/service-accounts/", {"name": "x"}, format="json").status_code == 403
    assert client.get("/api/v1/tenants/globex/topics/").status_code == 404
    assert PersonalToken.objects.get(token_id=made["token_id"]).last_used_at is not None
    # A token cannot make or revoke tokens.
    assert client.post("/api/v1/auth/tokens/", {"name": "x"}, format="json").status_code == 403
    assert client.delete(f"/api/v1/auth/tokens/{made['token_id']}/").status_code == 403
    # Its person's role changes apply at once; leaving the tenant closes it.
    Membership.objects.filter(tenant=tenant_a, user=developer).delete()
    assert client.get(f"{T}/topics/").status_code == 404


def test_revoked_expired_and_wrong_tokens_are_refused(developer):
    made = make_token(developer)
    token = made["token"]
    assert bearer(token).get("/api/v1/auth/me/").status_code == 200
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in (wrong, "mrpat_short", token + "x"):
        response = bearer(bad).get("/api/v1/auth/me/")
        assert response.status_code == 401, bad
        assert response.json()["error"]["message"] == "invalid, expired or revoked personal token"
    PersonalToken.objects.filter(token_id=made["token_id"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert bearer(token).get("/api/v1/auth/me/").status_code == 401
    other = make_token(developer)
    listed = session_client(developer).get("/api/v1/auth/tokens/").json()
    assert {t["token_id"]: t["state"] for t in listed} == {
        made["token_id"]: "expired",
        other["token_id"]: "active",
    }
    revoked = session_client(developer).delete(f"/api/v1/auth/tokens/{other['token_id']}/")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert bearer(other["token"]).get("/api/v1/auth/me/").status_code == 401
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"account.token.create", "account.token.revoke"} <= actions


def test_tokens_in_the_console(developer):
    client = Client()
    client.force_login(developer)
    page = client.post("/account/tokens/", {"name": "deploy", "expires_in_days": "7"})
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    token = re.search(rb'id="personal-token" value="(mrpat_\w+)"', page.content).group(1).decode()
    assert bearer(token).get("/api/v1/auth/me/").json()["username"] == developer.username
    account = client.get("/account/").content.decode()
    assert "deploy" in account and token not in account  # shown once
    token_id = PersonalToken.objects.get(user=developer).token_id
    client.post(f"/account/tokens/{token_id}/revoke/")
    assert bearer(token).get("/api/v1/auth/me/").status_code == 401
    assert client.post("/account/tokens/", {"name": "", "expires_in_days": "x"}).status_code == 302


def test_ownership_moves_in_one_step(owner, admin_user, developer, tenant_a):
    target = Membership.objects.get(tenant=tenant_a, user=developer)
    url = f"{T}/members/{target.pk}/transfer-ownership/"
    assert session_client(admin_user).post(url).status_code == 403
    response = session_client(owner).post(url)
    assert response.status_code == 200 and response.json()["role"] == "owner"
    roles = dict(Membership.objects.filter(tenant=tenant_a).values_list("user__username", "role"))
    assert roles[developer.username] == Role.OWNER and roles[owner.username] == Role.ADMIN
    assert AuditEvent.objects.filter(action="member.transfer_ownership", tenant=tenant_a)
    # The console: the new owner hands it back.
    client = Client()
    client.force_login(developer)
    back = Membership.objects.get(tenant=tenant_a, user=owner)
    client.post(f"/t/{tenant_a.slug}/members/transfer/", {"member": back.pk})
    assert Membership.objects.get(pk=back.pk).role == Role.OWNER


def test_members_leave_but_the_only_owner_stays(owner, viewer, tenant_a):
    assert session_client(viewer).post(f"{T}/leave/").status_code == 204
    assert not Membership.objects.filter(tenant=tenant_a, user=viewer).exists()
    assert session_client(viewer).post(f"{T}/leave/").status_code == 404
    refused = session_client(owner).post(f"{T}/leave/")
    assert refused.status_code == 400 and "only owner" in refused.json()["error"]["message"]
    client = Client()
    client.force_login(owner)
    client.post(f"/t/{tenant_a.slug}/members/leave/")
    assert Membership.objects.filter(tenant=tenant_a, user=owner).exists()
    assert AuditEvent.objects.filter(action="member.leave", tenant=tenant_a).count() == 1
