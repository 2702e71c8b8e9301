"""API key lifecycle: secret shown once, nothing recoverable stored, revoked/expired refused."""

from __future__ import annotations

import base64
import secrets
from datetime import timedelta

import pytest
import scramp
from django.utils import timezone
from rest_framework.test import APIClient

from control_plane.access import services as access_services
from control_plane.access.credentials import verified_cache
from control_plane.access.models import ApiKey
from control_plane.audit.models import AuditEvent
from tests.conftest import FULL_ACCESS, SYSTEM, basic_auth, key_client, session_client

T = "/api/v1/tenants/acme"


@pytest.fixture
def argon2(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.Argon2PasswordHasher"]


@pytest.fixture
def app_account(tenant_a):
    sa = access_services.create_service_account(SYSTEM, tenant_a, name="app")
    for rtype, name, op in (("cluster", "kafka-cluster", "all"), ("topic", "*", "all")):
        access_services.create_acl(
            SYSTEM,
            tenant_a,
            principal="User:app",
            resource_type=rtype,
            pattern_type="literal",
            resource_name=name,
            operation=op,
            permission="allow",
        )
    return sa


def test_created_secret_authenticates_and_is_shown_once(argon2, owner, app_account):
    admin = session_client(owner)
    response = admin.post(
        f"{T}/api-keys/", {"service_account": "app", "description": "ci"}, format="json"
    )
    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    key_id, secret = body["key_id"], body["secret"]
    assert key_id.startswith("MRK") and secret.startswith("mrsec_")
    assert body["state"] == "active" and body["created_by"] == "olivia"
    # Shown once: neither detail nor list carries it again.
    assert "secret" not in admin.get(f"{T}/api-keys/{key_id}/").json()
    assert all("secret" not in k for k in admin.get(f"{T}/api-keys/").json()["results"])
    # Basic and Bearer both work.
    assert key_client(key_id, secret).get(f"{T}/topics/").status_code == 200
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {key_id}.{secret}")
    assert bearer.get(f"{T}/topics/").status_code == 200
    assert ApiKey.objects.get(key_id=key_id).last_used_at is not None


def test_stored_row_holds_no_recoverable_secret(argon2, app_account):
    created = access_services.create_api_key(SYSTEM, app_account)
    key = ApiKey.objects.get(pk=created.api_key.pk)
    secret = created.secret
    stored = []
    for field in ApiKey._meta.concrete_fields:
        value = getattr(key, field.attname)
        if isinstance(value, memoryview):
            value = bytes(value)
        stored.append(value)
    for value in stored:
        if isinstance(value, bytes):
            assert secret.encode() not in value
        elif isinstance(value, str):
            assert secret not in value
    assert key.secret_hash.startswith("argon2$")
    assert key.scram_sha256_iterations >= 4096 and key.scram_sha512_iterations >= 4096
    for event in AuditEvent.objects.all():
        assert secret not in str(event.before) + str(event.after)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_stored_scram_credentials_verify_a_real_exchange(app_account, mechanism):
    created = access_services.create_api_key(SYSTEM, app_account)
    key = ApiKey.objects.get(pk=created.api_key.pk)
    suffix = mechanism.rsplit("-", 1)[1]

    def auth_fn(username):
        assert username == key.key_id
        return (
            bytes(getattr(key, f"scram_sha{suffix}_salt")),
            bytes(getattr(key, f"scram_sha{suffix}_stored_key")),
            bytes(getattr(key, f"scram_sha{suffix}_server_key")),
            getattr(key, f"scram_sha{suffix}_iterations"),
        )

    def exchange(password):
        client = scramp.ScramClient([mechanism], key.key_id, password)
        server = scramp.ScramMechanism(mechanism).make_server(auth_fn)
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        server.set_client_final(client.get_client_final())
        client.set_server_final(server.get_server_final())

    exchange(created.secret)
    with pytest.raises(scramp.ScramException):
        exchange(created.secret + "x")


def test_revoked_key_is_refused(owner, app_account):
    created = access_services.create_api_key(SYSTEM, app_account)
    client = key_client(created.api_key.key_id, created.secret)
    assert client.get(f"{T}/topics/").status_code == 200  # also warms the verified cache
    response = session_client(owner).delete(f"{T}/api-keys/{created.api_key.key_id}/")
    assert response.status_code == 200 and response.json()["state"] == "revoked"
    refused = client.get(f"{T}/topics/")
    assert refused.status_code == 401
    assert refused.json()["error"] == {
        "code": "authentication_failed",
        "message": "API key has been revoked",
        "details": {},
    }
    assert refused["WWW-Authenticate"].startswith("Bearer")
    # Revoking again is idempotent and logs nothing more.
    session_client(owner).delete(f"{T}/api-keys/{created.api_key.key_id}/")
    assert AuditEvent.objects.filter(action="api_key.revoke").count() == 1


def test_expired_key_is_refused(app_account):
    created = access_services.create_api_key(
        SYSTEM, app_account, expires_at=timezone.now() + timedelta(hours=1)
    )
    client = key_client(created.api_key.key_id, created.secret)
    assert client.get(f"{T}/topics/").status_code == 200
    ApiKey.objects.filter(pk=created.api_key.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = client.get(f"{T}/topics/")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "API key has expired"


def test_past_expiry_is_rejected_at_creation(owner, app_account):
    response = session_client(owner).post(
        f"{T}/api-keys/",
        {"service_account": "app", "expires_at": "2001-01-01T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 400
    assert "expires_at" in response.json()["error"]["details"]


@pytest.mark.parametrize(
    "header",
    [
        "Basic " + base64.b64encode(b"MRKNOPE:whatever").decode(),
        "Basic not-base64!!",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Bearer MRKNOPE.whatever",
        "Bearer nodot",
    ],
)
def test_bad_credentials_are_401(tenant_a, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(f"{T}/topics/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_wrong_secret_for_real_key_says_nothing_more(app_account):
    created = access_services.create_api_key(SYSTEM, app_account)
    client = key_client(created.api_key.key_id, created.secret[:-1] + "?")
    assert client.get(f"{T}/topics/").json()["error"]["message"] == "invalid API key or secret"


def test_failed_key_attempts_are_rate_limited(settings, app_account):
    settings.MILLRACE_AUTH_FAILURES_PER_MINUTE = 3
    created = access_services.create_api_key(SYSTEM, app_account)
    # Fresh addresses: the cache (Redis in CI) outlives a test.
    ip, other_ip = (f"2001:db8::{secrets.token_hex(2)}:{secrets.token_hex(2)}" for _ in range(2))
    client = APIClient(REMOTE_ADDR=ip)
    client.credentials(HTTP_AUTHORIZATION=basic_auth(created.api_key.key_id, "wrong"))
    codes = [client.get(f"{T}/topics/").status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]
    # Even the right secret waits out the window from that address ...
    good = APIClient(REMOTE_ADDR=ip)
    good.credentials(HTTP_AUTHORIZATION=basic_auth(created.api_key.key_id, created.secret))
    limited = good.get(f"{T}/topics/")
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "throttled"
    # ... while other addresses are unaffected.
    elsewhere = APIClient(REMOTE_ADDR=other_ip)
    elsewhere.credentials(HTTP_AUTHORIZATION=basic_auth(created.api_key.key_id, created.secret))
    assert elsewhere.get(f"{T}/topics/").status_code == 200


def test_verified_cache_does_not_outlive_a_changed_hash(app_account):
    created = access_services.create_api_key(SYSTEM, app_account)
    client = key_client(created.api_key.key_id, created.secret)
    assert client.get(f"{T}/topics/").status_code == 200
    ApiKey.objects.filter(pk=created.api_key.pk).update(secret_hash="md5$x$y")
    assert client.get(f"{T}/topics/").status_code == 401
    verified_cache.clear()


def test_deleting_service_account_removes_keys_and_acls(owner, app_account):
    created = access_services.create_api_key(SYSTEM, app_account)
    assert session_client(owner).delete(f"{T}/service-accounts/app/").status_code == 204
    assert not ApiKey.objects.filter(pk=created.api_key.pk).exists()
    assert key_client(created.api_key.key_id, created.secret).get(f"{T}/topics/").status_code == 401
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"api_key.delete", "acl.delete", "service_account.delete"} <= actions


def test_full_access_key_helper_matches_docs(tenant_a, make_key):
    client, _, _ = make_key(tenant_a, FULL_ACCESS)
    assert client.get(f"{T}/acls/").status_code == 200
