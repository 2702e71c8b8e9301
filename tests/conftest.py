"""Shared fixtures: two tenants, a user per role, an outsider, and API-key clients.

Tenant A ("acme") has an owner, admin, developer and viewer; tenant B ("globex") is
owned by the outsider. Tests ask "can a caller of A reach anything of B?" (never), and
"what may each role of A do in A?".
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from control_plane.access import services as access_services
from control_plane.access.credentials import verified_cache
from control_plane.core.actor import Actor
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role, Tenant

SYSTEM = Actor.system()


@pytest.fixture(autouse=True)
def _fast_and_isolated(settings: Any) -> Iterable[None]:
    # Argon2 is exercised by the key lifecycle tests; elsewhere a fast hasher keeps the
    # suite quick. Auth-failure limits are raised so only the rate-limit test meets them.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.MILLRACE_AUTH_FAILURES_PER_MINUTE = 100_000
    # Broker tests run two at a time on two cores: a 10 s lease (what test brokers get too)
    # keeps a busy moment from fencing a broker; replication tests choose their own.
    settings.MILLRACE_BROKER_LEASE_SECONDS = 10
    verified_cache.clear()
    yield
    verified_cache.clear()


def make_user(username: str, *, staff: bool = False) -> Any:
    return get_user_model().objects.create_user(
        username=username,
        password=f"{username}-pw-123!",
        email=f"{username}@example.com",
        is_staff=staff,
    )


@pytest.fixture
def tenant_a(db: None) -> Tenant:
    return tenancy_services.create_tenant(SYSTEM, slug="acme", name="Acme")


@pytest.fixture
def tenant_b(db: None) -> Tenant:
    return tenancy_services.create_tenant(SYSTEM, slug="globex", name="Globex")


def _member(tenant: Tenant, username: str, role: str) -> Any:
    user = make_user(username)
    tenancy_services.add_member(SYSTEM, tenant, user=user, role=role)
    return user


@pytest.fixture
def owner(tenant_a: Tenant) -> Any:
    return _member(tenant_a, "olivia", Role.OWNER)


@pytest.fixture
def admin_user(tenant_a: Tenant) -> Any:
    return _member(tenant_a, "adam", Role.ADMIN)


@pytest.fixture
def developer(tenant_a: Tenant) -> Any:
    return _member(tenant_a, "dev", Role.DEVELOPER)


@pytest.fixture
def viewer(tenant_a: Tenant) -> Any:
    return _member(tenant_a, "vic", Role.VIEWER)


@pytest.fixture
def outsider(tenant_b: Tenant) -> Any:
    return _member(tenant_b, "oscar", Role.OWNER)


@pytest.fixture
def operator(db: None) -> Any:
    return make_user("root-op", staff=True)


def session_client(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def basic_auth(key_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{key_id}:{secret}".encode()).decode()


def key_client(key_id: str, secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic_auth(key_id, secret))
    return client


AclSpec = tuple[str, str, str, str]  # resource_type, pattern_type, resource_name, operation


@pytest.fixture
def make_key(db: None) -> Callable[..., tuple[APIClient, Any, str]]:
    """A service account with the given ALLOW ACLs and a key; returns (client, key, secret)."""
    counter = iter(range(1000))

    def factory(
        tenant: Tenant, acls: Iterable[AclSpec] = (), *, name: str | None = None
    ) -> tuple[APIClient, Any, str]:
        sa = access_services.create_service_account(
            SYSTEM, tenant, name=name or f"app-{next(counter)}"
        )
        for resource_type, pattern_type, resource_name, operation in acls:
            access_services.create_acl(
                SYSTEM,
                tenant,
                principal=sa.principal,
                resource_type=resource_type,
                pattern_type=pattern_type,
                resource_name=resource_name,
                operation=operation,
                permission="allow",
            )
        created = access_services.create_api_key(SYSTEM, sa)
        return key_client(created.api_key.key_id, created.secret), created.api_key, created.secret

    return factory


FULL_ACCESS: list[AclSpec] = [
    ("cluster", "literal", "kafka-cluster", "all"),
    ("topic", "literal", "*", "all"),
    ("group", "literal", "*", "all"),
]
