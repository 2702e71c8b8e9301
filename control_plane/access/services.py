"""Use cases for service accounts, API keys and ACLs, and the questions asked of them.

Writes record audit events in the same transaction; snapshots never contain secrets.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from control_plane.access.credentials import (
    derive_stored_secret,
    generate_key_id,
    generate_secret,
    secret_matches,
    spend_a_check,
)
from control_plane.access.models import SERVICE_ACCOUNT_NAME_REGEX, Acl, ApiKey, ServiceAccount
from control_plane.audit.services import record_event
from control_plane.core.actor import Actor
from control_plane.core.errors import AlreadyExists, InvalidInput
from control_plane.core.notify import announce_keys_closed, notify_metadata_changed
from control_plane.tenancy.models import Tenant
from data_plane.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Decision,
    InvalidAclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
)

LAST_USED_RESOLUTION = timedelta(minutes=1)


# --- snapshots -----------------------------------------------------------------------------


def service_account_snapshot(sa: ServiceAccount) -> dict[str, Any]:
    return {"name": sa.name, "description": sa.description}


def api_key_snapshot(key: ApiKey) -> dict[str, Any]:
    return {
        "key_id": key.key_id,
        "service_account": key.service_account.name,
        "description": key.description,
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def acl_snapshot(acl: Acl) -> dict[str, Any]:
    return {
        "principal": acl.principal,
        "resource_type": acl.resource_type,
        "pattern_type": acl.pattern_type,
        "resource_name": acl.resource_name,
        "operation": acl.operation,
        "permission": acl.permission,
        "host": acl.host,
    }


# --- service accounts --------------------------------------------------------------------


def _validate_service_account_name(name: str) -> None:
    if not re.match(SERVICE_ACCOUNT_NAME_REGEX, name):
        raise InvalidInput(
            "name must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            field="name",
        )


@transaction.atomic
def create_service_account(
    actor: Actor, tenant: Tenant, *, name: str, description: str = ""
) -> ServiceAccount:
    _validate_service_account_name(name)
    if ServiceAccount.objects.filter(tenant=tenant, name=name).exists():
        raise AlreadyExists(f"service account {name!r} already exists", field="name")
    try:
        with transaction.atomic():
            sa = ServiceAccount.objects.create(tenant=tenant, name=name, description=description)
    except IntegrityError:
        raise AlreadyExists(f"service account {name!r} already exists", field="name") from None
    record_event(
        actor,
        tenant=tenant,
        action="service_account.create",
        object_type="service_account",
        object_id=sa.pk,
        object_repr=sa.name,
        after=service_account_snapshot(sa),
    )
    return sa


@transaction.atomic
def update_service_account(actor: Actor, sa: ServiceAccount, *, description: str) -> ServiceAccount:
    before = service_account_snapshot(sa)
    sa.description = description
    sa.save(update_fields=["description"])
    record_event(
        actor,
        tenant=sa.tenant,
        action="service_account.update",
        object_type="service_account",
        object_id=sa.pk,
        object_repr=sa.name,
        before=before,
        after=service_account_snapshot(sa),
    )
    return sa


@transaction.atomic
def delete_service_account(actor: Actor, sa: ServiceAccount) -> None:
    """Delete the account with its keys and ACLs (each key and ACL gets an event)."""
    for key in sa.api_keys.all():
        record_event(
            actor,
            tenant=sa.tenant,
            action="api_key.delete",
            object_type="api_key",
            object_id=key.key_id,
            object_repr=key.key_id,
            before=api_key_snapshot(key),
        )
    for acl in sa.acls.all():
        record_event(
            actor,
            tenant=sa.tenant,
            action="acl.delete",
            object_type="acl",
            object_id=acl.pk,
            object_repr=str(acl),
            before=acl_snapshot(acl),
        )
    record_event(
        actor,
        tenant=sa.tenant,
        action="service_account.delete",
        object_type="service_account",
        object_id=sa.pk,
        object_repr=sa.name,
        before=service_account_snapshot(sa),
    )
    notify_metadata_changed("access.service_account_deleted", tenant=sa.tenant_id)
    announce_keys_closed(sa.api_keys.values_list("key_id", flat=True))
    sa.delete()


# --- API keys -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CreatedApiKey:
    api_key: ApiKey
    secret: str  # returned to the caller once; never stored


@transaction.atomic
def create_api_key(
    actor: Actor,
    sa: ServiceAccount,
    *,
    description: str = "",
    expires_at: datetime | None = None,
) -> CreatedApiKey:
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput("expires_at must be in the future", field="expires_at")
    _check_length(ApiKey, "description", description)
    secret = generate_secret()
    stored = derive_stored_secret(secret)
    key = ApiKey.objects.create(
        service_account=sa,
        tenant_id=sa.tenant_id,
        key_id=generate_key_id(),
        description=description,
        secret_hash=stored.secret_hash,
        scram_sha256_salt=stored.sha256.salt,
        scram_sha256_stored_key=stored.sha256.stored_key,
        scram_sha256_server_key=stored.sha256.server_key,
        scram_sha256_iterations=stored.sha256.iterations,
        scram_sha512_salt=stored.sha512.salt,
        scram_sha512_stored_key=stored.sha512.stored_key,
        scram_sha512_server_key=stored.sha512.server_key,
        scram_sha512_iterations=stored.sha512.iterations,
        created_by=actor.user if actor.user is not None and actor.user.pk else None,
        expires_at=expires_at,
    )
    # Brokers learn of the key with their next metadata change (their sweep of revoked
    # keys compares connections against the set of usable keys).
    notify_metadata_changed("access.api_key_created", tenant=sa.tenant_id, key_id=key.key_id)
    record_event(
        actor,
        tenant=sa.tenant,
        action="api_key.create",
        object_type="api_key",
        object_id=key.key_id,
        object_repr=key.key_id,
        after=api_key_snapshot(key),
    )
    return CreatedApiKey(api_key=key, secret=secret)


@transaction.atomic
def revoke_api_key(actor: Actor, key: ApiKey) -> ApiKey:
    """Revoke now; idempotent (revoking a revoked key changes nothing and logs nothing)."""
    before = api_key_snapshot(key)
    updated = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    key.refresh_from_db()
    if updated:
        notify_metadata_changed("access.api_key_revoked", tenant=key.tenant_id, key_id=key.key_id)
        announce_keys_closed([key.key_id])
        record_event(
            actor,
            tenant=key.tenant,
            action="api_key.revoke",
            object_type="api_key",
            object_id=key.key_id,
            object_repr=key.key_id,
            before=before,
            after=api_key_snapshot(key),
        )
    return key


class KeyRejected(Exception):
    """Authentication with an API key failed; ``reason`` is safe to show the caller."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def authenticate_api_key(key_id: str, secret: str) -> ApiKey:
    """The key for this id and secret, if the secret matches and the key is usable.

    Unknown ids and wrong secrets get the same answer; revoked/expired is said only to a
    caller who proved they hold the secret.
    """
    key = ApiKey.objects.select_related("service_account", "tenant").filter(key_id=key_id).first()
    if key is None:
        spend_a_check(secret)  # as long as a wrong secret takes: no timing oracle
        raise KeyRejected("invalid API key or secret")
    if not secret_matches(key_id, secret, key.secret_hash):
        raise KeyRejected("invalid API key or secret")
    if key.revoked_at is not None:
        raise KeyRejected("API key has been revoked")
    if key.expires_at is not None and key.expires_at <= timezone.now():
        raise KeyRejected("API key has expired")
    now = timezone.now()
    if key.last_used_at is None or key.last_used_at < now - LAST_USED_RESOLUTION:
        # One write per key per minute at most, however busy the key is.
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


# --- ACLs ----------------------------------------------------------------------------------


def resolve_principal(tenant: Tenant, principal: str) -> ServiceAccount | None:
    """``User:*`` -> None (every principal); ``User:<name>`` -> that service account."""
    if principal == WILDCARD_PRINCIPAL:
        return None
    if not principal.startswith("User:") or len(principal) == len("User:"):
        raise InvalidInput(
            "principal must be 'User:<service account name>' or 'User:*'", field="principal"
        )
    name = principal[len("User:") :]
    sa = ServiceAccount.objects.filter(tenant=tenant, name=name).first()
    if sa is None:
        raise InvalidInput(f"no service account named {name!r}", field="principal")
    return sa


def _enum(enum_cls: type, value: str, field: str) -> Any:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(member.value for member in enum_cls)
        raise InvalidInput(f"{field} must be one of: {allowed}", field=field) from None


def _check_length(model: Any, field: str, value: str) -> None:
    limit = model._meta.get_field(field).max_length
    if len(value) > limit:
        raise InvalidInput(f"use at most {limit} characters", field=field)


def _acl_host(host: str) -> str:
    """``*`` (any address, also for an empty host) or one IP address, normalized."""
    if host in ("", WILDCARD_HOST):
        return WILDCARD_HOST
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise InvalidInput("enter '*' or one IP address", field="host") from None


@transaction.atomic
def create_acl(
    actor: Actor,
    tenant: Tenant,
    *,
    principal: str,
    resource_type: str,
    pattern_type: str,
    resource_name: str,
    operation: str,
    permission: str,
    host: str = WILDCARD_HOST,
) -> Acl:
    sa = resolve_principal(tenant, principal)
    _check_length(Acl, "resource_name", resource_name)
    binding = AclBinding(
        principal=principal,
        resource_type=_enum(ResourceType, resource_type, "resource_type"),
        pattern_type=_enum(PatternType, pattern_type, "pattern_type"),
        resource_name=resource_name,
        operation=_enum(Operation, operation, "operation"),
        permission=_enum(Permission, permission, "permission"),
        host=_acl_host(host),
    )
    try:
        binding.validate()
    except InvalidAclBinding as exc:
        raise InvalidInput(exc.message, field=exc.field) from None
    fields = {
        "tenant": tenant,
        "service_account": sa,
        "resource_type": binding.resource_type.value,
        "pattern_type": binding.pattern_type.value,
        "resource_name": binding.resource_name,
        "operation": binding.operation.value,
        "permission": binding.permission.value,
        "host": binding.host,
    }
    if Acl.objects.filter(**fields).exists():
        raise AlreadyExists("an identical ACL already exists", field="non_field_errors")
    try:
        with transaction.atomic():
            acl = Acl.objects.create(**fields)
    except IntegrityError:
        raise AlreadyExists("an identical ACL already exists", field="non_field_errors") from None
    record_event(
        actor,
        tenant=tenant,
        action="acl.create",
        object_type="acl",
        object_id=acl.pk,
        object_repr=str(acl),
        after=acl_snapshot(acl),
    )
    notify_metadata_changed("access.acls_changed", tenant=tenant.pk)
    return acl


@transaction.atomic
def delete_acl(actor: Actor, acl: Acl) -> None:
    record_event(
        actor,
        tenant=acl.tenant,
        action="acl.delete",
        object_type="acl",
        object_id=acl.pk,
        object_repr=str(acl),
        before=acl_snapshot(acl),
    )
    notify_metadata_changed("access.acls_changed", tenant=acl.tenant_id)
    acl.delete()


def tenant_bindings(tenant_id: int) -> list[AclBinding]:
    return [
        acl.to_binding()
        for acl in Acl.objects.filter(tenant_id=tenant_id).select_related("service_account")
    ]


def authorize_key(
    key: ApiKey,
    *,
    host: str | None,
    operation: Operation,
    resource_type: ResourceType,
    resource_name: str,
    bindings: list[AclBinding] | None = None,
) -> Decision:
    """May this key's service account do ``operation`` on the resource in its tenant?"""
    return authorize(
        bindings if bindings is not None else tenant_bindings(key.tenant_id),
        principal=key.service_account.principal,
        host=host or "",
        operation=operation,
        resource_type=resource_type,
        resource_name=resource_name,
    )
