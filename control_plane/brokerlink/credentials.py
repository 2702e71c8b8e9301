"""Who a SASL user is: API keys (SCRAM credentials, PLAIN) and Millrace's own principals
(``data_plane.internal_auth``: brokers, the web tier's delegated keys, operators, console
members, the internal reader), each usable only while what it stands for exists.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from control_plane.access import services as access_services
from control_plane.access.models import ApiKey
from control_plane.brokerlink.connections import fresh_connection
from control_plane.tenancy.models import Membership, Role, Tenant
from data_plane import internal_auth
from data_plane.broker.ports import ScramCredentials
from data_plane.metadata.model import Principal

DEFAULT_TENANT = "default"


def operator_of(user: str, *, fresh: bool = True) -> tuple[Tenant, Any] | None:
    """(tenant, staff user) an operator user name acts as, while the user is active
    staff and the tenant exists. ``fresh=False`` inside a transaction (where the
    connection must be kept)."""
    member = internal_auth.operator_member(user)
    if member is None:
        return None
    if fresh:
        fresh_connection()
    slug, user_id = member
    staff = get_user_model().objects.filter(pk=user_id, is_active=True, is_staff=True).first()
    tenant = Tenant.objects.filter(slug=slug).first()
    if staff is None or tenant is None:
        return None
    return tenant, staff


def connect_principal(tenant_id: int, tenant_slug: str, user: str) -> Principal:
    """The Connect fleet's principal in a tenant: its Connect cluster's topics and group."""
    return Principal(
        tenant_id,
        tenant_slug,
        internal_auth.CONNECT_PRINCIPAL_NAME,
        user,
        internal=True,
        grants=internal_auth.CONNECT,
        resources=internal_auth.CONNECT_RESOURCES,
    )


class DjangoCredentials:
    """:class:`data_plane.broker.ports.Credentials` over API keys and memberships."""

    def __init__(self, *, allow_anonymous: bool = False) -> None:
        self.allow_anonymous = allow_anonymous

    def _active_key(self, key_id: str) -> ApiKey | None:
        fresh_connection()
        return (
            ApiKey.objects.active()
            .select_related("service_account", "tenant")
            .filter(key_id=key_id)
            .first()
        )

    @staticmethod
    def _principal(key: ApiKey) -> Principal:
        return Principal(key.tenant_id, key.tenant.slug, key.service_account.principal, key.key_id)

    def _proxied_key(self, tenant_slug: str, key_id: str) -> ApiKey | None:
        key = self._active_key(key_id)
        if key is None or key.tenant.slug != tenant_slug:
            return None
        return key

    @staticmethod
    def _console_membership(user: str) -> Membership | None:
        """The membership a console user name acts for, while it exists (and the user is
        active)."""
        member = internal_auth.console_member(user)
        if member is None:
            return None
        fresh_connection()
        slug, user_id = member
        return (
            Membership.objects.select_related("tenant")
            .filter(tenant__slug=slug, user_id=user_id, user__is_active=True)
            .first()
        )

    @staticmethod
    def _internal_tenant(user: str) -> Tenant | None:
        slug = internal_auth.tenant_slug(user) or internal_auth.connect_tenant(user)
        if slug is None:
            return None
        fresh_connection()
        return Tenant.objects.filter(slug=slug).first()

    def scram_credentials(self, key_id: str, mechanism: str) -> ScramCredentials | None:
        if key_id == internal_auth.BROKER_USER:
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        proxied = internal_auth.proxied_key(key_id)
        if proxied is not None:
            if self._proxied_key(*proxied) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        if internal_auth.operator_member(key_id) is not None:
            if operator_of(key_id) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        if internal_auth.console_member(key_id) is not None:
            if self._console_membership(key_id) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        if (
            internal_auth.tenant_slug(key_id) is not None
            or internal_auth.connect_tenant(key_id) is not None
        ):
            if self._internal_tenant(key_id) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        key = self._active_key(key_id)
        if key is None:
            return None
        prefix = "scram_sha256" if mechanism == "SCRAM-SHA-256" else "scram_sha512"
        return ScramCredentials(
            bytes(getattr(key, f"{prefix}_salt")),
            bytes(getattr(key, f"{prefix}_stored_key")),
            bytes(getattr(key, f"{prefix}_server_key")),
            getattr(key, f"{prefix}_iterations"),
        )

    def principal_for_key(self, key_id: str) -> Principal | None:
        if key_id == internal_auth.BROKER_USER:
            return Principal(
                0, "", internal_auth.BROKER_PRINCIPAL_NAME, key_id, internal=True, broker=True
            )
        proxied = internal_auth.proxied_key(key_id)
        if proxied is not None:
            key = self._proxied_key(*proxied)
            # The key itself, ACLs and revocation included; the web tier proved its secret.
            return None if key is None else self._principal(key)
        if internal_auth.operator_member(key_id) is not None:
            found = operator_of(key_id)
            if found is None:
                return None
            tenant, _ = found
            return Principal(
                tenant.pk,
                tenant.slug,
                internal_auth.OPERATOR_PRINCIPAL_NAME,
                key_id,
                internal=True,
                operator=True,
                grants=internal_auth.OPERATOR,
            )
        if internal_auth.console_member(key_id) is not None:
            membership = self._console_membership(key_id)
            if membership is None:
                return None
            writer = Role.at_least(membership.role, Role.DEVELOPER)
            return Principal(
                membership.tenant_id,
                membership.tenant.slug,
                internal_auth.CONSOLE_PRINCIPAL_NAME,
                key_id,
                internal=True,
                grants=internal_auth.CONSOLE_WRITER if writer else internal_auth.ALLOWED,
            )
        if internal_auth.connect_tenant(key_id) is not None:
            tenant = self._internal_tenant(key_id)
            if tenant is None:
                return None
            return connect_principal(tenant.pk, tenant.slug, key_id)
        if internal_auth.tenant_slug(key_id) is not None:
            tenant = self._internal_tenant(key_id)
            if tenant is None:
                return None
            return Principal(
                tenant.pk, tenant.slug, internal_auth.PRINCIPAL_NAME, key_id, internal=True
            )
        key = self._active_key(key_id)
        if key is None:
            return None
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
        return self._principal(key)

    def verify_plain(self, key_id: str, secret: str) -> Principal | None:
        fresh_connection()
        try:
            key = access_services.authenticate_api_key(key_id, secret)
        except access_services.KeyRejected:
            return None
        return self._principal(key)

    def anonymous_principal(self) -> Principal | None:
        if not self.allow_anonymous:
            return None
        fresh_connection()
        tenant = Tenant.objects.filter(slug=DEFAULT_TENANT).first()
        if tenant is None:
            return None
        return Principal(tenant.pk, tenant.slug, "User:ANONYMOUS", None)
