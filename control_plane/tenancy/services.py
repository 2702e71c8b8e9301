"""Use cases for tenants and memberships. Every write records an audit event; tenant
changes also reach brokers (``notify_metadata_changed``: their limits are enforced there)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from control_plane.audit.services import record_event
from control_plane.core.actor import Actor
from control_plane.core.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    LimitExceeded,
    NotPermitted,
)
from control_plane.core.notify import notify_metadata_changed
from control_plane.tenancy.models import (
    SLUG_VALIDATOR,
    ClientQuota,
    Membership,
    Plan,
    Role,
    Tenant,
)
from data_plane import client_quotas

LIMIT_FIELDS = (
    "max_partitions",
    "max_storage_bytes",
    "produce_byte_rate",
    "fetch_byte_rate",
    "default_partitions",
    "max_connectors",
    "max_connector_tasks",
    "max_connections",
    "max_retention_ms",
)
# None: the deployment's default partition count; no retention ceiling.
NULLABLE_LIMITS = {"default_partitions", "max_retention_ms"}
# What a plan sets (every limit but the tenant's own default partition count).
PLAN_LIMITS = tuple(f for f in LIMIT_FIELDS if f != "default_partitions")


def tenant_snapshot(tenant: Tenant) -> dict[str, Any]:
    return {
        "slug": tenant.slug,
        "name": tenant.name,
        "plan": tenant.plan.slug if tenant.plan_id else None,
        **{field: getattr(tenant, field) for field in LIMIT_FIELDS},
    }


def membership_snapshot(membership: Membership) -> dict[str, Any]:
    return {"user": membership.user.get_username(), "role": membership.role}


def is_operator(actor: Actor) -> bool:
    """Staff, or the system itself (management commands, jobs)."""
    return actor.is_staff or (actor.user is None and actor.api_key is None)


def plan_limits(plan: Plan) -> dict[str, int | None]:
    return {field: getattr(plan, field) for field in PLAN_LIMITS}


def role_of(user: AbstractBaseUser | None, tenant: Tenant) -> str | None:
    """The user's role in the tenant, or None when they are not a member."""
    if user is None or not user.is_authenticated:
        return None
    membership = Membership.objects.filter(tenant=tenant, user=user).only("role").first()
    return membership.role if membership else None


def check_limits(
    limits: dict[str, int | None],
    tenant: Tenant | None = None,
    fields: tuple[str, ...] = LIMIT_FIELDS,
) -> None:
    for field, value in limits.items():
        if field not in fields:
            raise InvalidInput(f"unknown limit {field!r}", field=field)
        if value is None and field in NULLABLE_LIMITS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(f"{field} must be a positive integer", field=field)
    ceiling = limits.get("max_partitions") or (tenant.max_partitions if tenant else None)
    wanted = limits.get("default_partitions")
    if wanted is not None and ceiling is not None and wanted > ceiling:
        raise InvalidInput(
            f"default_partitions ({wanted}) cannot exceed max_partitions ({ceiling})",
            field="default_partitions",
        )


@transaction.atomic
def create_tenant(
    actor: Actor,
    *,
    slug: str,
    name: str,
    owner: AbstractBaseUser | None = None,
    limits: dict[str, int | None] | None = None,
    plan: Plan | None = None,
) -> Tenant:
    """Create a tenant (operators only); ``owner`` becomes its first owner. Its limits
    are ``plan``'s (the default plan's when neither a plan nor limits are given), then
    ``limits`` one by one."""
    if actor.api_key is not None or (actor.user is not None and not actor.is_staff):
        raise NotPermitted("only operators (staff) can create tenants")
    return _create_tenant(actor, slug=slug, name=name, owner=owner, limits=limits, plan=plan)


@transaction.atomic
def create_own_tenant(actor: Actor, *, slug: str, name: str) -> Tenant:
    """A signed-in person creates a tenant on the default plan (the deployment's default
    limits when there is none) and becomes its owner. Who may, and how many, is the
    caller's to check (the accounts app: a verified address, within the limit)."""
    if actor.api_key is not None or actor.user is None:
        raise NotPermitted("only a signed-in person can create a tenant of their own")
    return _create_tenant(actor, slug=slug, name=name, owner=actor.user, limits=None, plan=None)


def _create_tenant(
    actor: Actor,
    *,
    slug: str,
    name: str,
    owner: AbstractBaseUser | None,
    limits: dict[str, int | None] | None,
    plan: Plan | None,
) -> Tenant:
    try:
        SLUG_VALIDATOR(slug)
    except ValidationError as exc:
        raise InvalidInput(exc.messages[0], field="slug") from None
    if not name.strip():
        raise InvalidInput("name must not be empty", field="name")
    limits = limits or {}
    if plan is None and not limits:
        plan = Plan.objects.filter(is_default=True).first()
    if plan is not None:
        limits = {**plan_limits(plan), **limits}
    check_limits(limits)
    if Tenant.objects.filter(slug=slug).exists():
        raise AlreadyExists(f"a tenant with slug {slug!r} already exists", field="slug")
    # Limits set one by one beside the plan's make the tenant's limits its own.
    kept = plan if plan is not None and limits == plan_limits(plan) else None
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(slug=slug, name=name.strip(), plan=kept, **limits)
    except IntegrityError:
        raise AlreadyExists(f"a tenant with slug {slug!r} already exists", field="slug") from None
    notify_metadata_changed("tenant.created", tenant=tenant.pk)
    record_event(
        actor,
        tenant=tenant,
        action="tenant.create",
        object_type="tenant",
        object_id=tenant.pk,
        object_repr=tenant.slug,
        after=tenant_snapshot(tenant),
    )
    if owner is not None:
        add_member(Actor.system(), tenant, user=owner, role=Role.OWNER)
    return tenant


@transaction.atomic
def update_tenant(
    actor: Actor,
    tenant: Tenant,
    *,
    name: str | None = None,
    limits: dict[str, int | None] | None = None,
    plan: Plan | None = None,
) -> Tenant:
    """Rename (owners), or assign a plan or change limits (operators only): a plan's
    limits are copied in, then ``limits``; a tenant whose limits then differ from its
    plan's has limits of its own (``plan`` None). Brokers apply the change at once."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = tenant_snapshot(tenant)
    if plan is not None:
        if not is_operator(actor):
            raise NotPermitted("only operators (staff) assign plans")
        for field, value in plan_limits(plan).items():
            setattr(tenant, field, value)
        tenant.plan = plan
    if limits:
        if not is_operator(actor):
            raise NotPermitted("only operators (staff) can change tenant limits")
        check_limits(limits, tenant)
        for field, value in limits.items():
            setattr(tenant, field, value)
        if tenant.plan is not None and plan_limits(tenant.plan) != {
            f: getattr(tenant, f) for f in PLAN_LIMITS
        }:
            tenant.plan = None  # its own limits now
    if tenant.default_partitions is not None and tenant.default_partitions > tenant.max_partitions:
        raise InvalidInput(
            f"default_partitions ({tenant.default_partitions}) cannot exceed max_partitions "
            f"({tenant.max_partitions})",
            field="default_partitions",
        )
    if name is not None:
        is_user = actor.user is not None or actor.api_key is not None
        if is_user and not actor.is_staff and role_of(actor.user, tenant) != Role.OWNER:
            raise NotPermitted("only owners can rename a tenant")
        if not name.strip():
            raise InvalidInput("name must not be empty", field="name")
        tenant.name = name.strip()
    save_tenant_change(actor, tenant, before)
    return tenant


def save_tenant_change(actor: Actor, tenant: Tenant, before: dict[str, Any]) -> bool:
    """Save the tenant if it differs from ``before`` (its snapshot), tell the brokers and
    audit it; False (nothing written) when nothing changed."""
    if tenant_snapshot(tenant) == before:
        return False
    tenant.save()
    notify_metadata_changed("tenant.updated", tenant=tenant.pk)
    record_event(
        actor,
        tenant=tenant,
        action="tenant.update",
        object_type="tenant",
        object_id=tenant.pk,
        object_repr=tenant.slug,
        before=before,
        after=tenant_snapshot(tenant),
    )
    return True


def check_may_manage(actor: Actor, tenant: Tenant, *, role: str) -> None:
    """NotPermitted unless ``actor`` may grant ``role`` in the tenant (InvalidInput for
    an unknown role): admins up to admin, owners any role."""
    _validate_role(role)
    _actor_may_manage(actor, tenant, target_role=role)


def ensure_not_deleting(tenant: Tenant) -> None:
    """Conflict when the tenant's deletion was asked for (as stored now, not as loaded)."""
    if Tenant.objects.filter(pk=tenant.pk, deletion_requested_at__isnull=False).exists():
        raise Conflict(f"tenant {tenant.slug!r} is being deleted")


def suspension_snapshot(tenant: Tenant) -> dict[str, Any]:
    return {
        "suspended": tenant.suspended_at is not None,
        "reason": tenant.suspension_reason,
        "reads_until": tenant.reads_until.isoformat() if tenant.reads_until else None,
    }


@transaction.atomic
def suspend_tenant(actor: Actor, tenant: Tenant, *, reason: str, read_grace_seconds: int) -> Tenant:
    """Operators: refuse the tenant's produce and new connections at once; connections
    already open may go on reading for ``read_grace_seconds``, then brokers close them.
    Nothing is deleted; :func:`resume_tenant` undoes it."""
    if not actor.is_staff:
        raise NotPermitted("only operators (staff) suspend tenants")
    reason = reason.strip()
    if len(reason) > 200:
        raise InvalidInput("at most 200 characters", field="reason")
    if isinstance(read_grace_seconds, bool) or not 0 <= read_grace_seconds <= 30 * 86400:
        raise InvalidInput("between 0 and 30 days (in seconds)", field="read_grace_seconds")
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    ensure_not_deleting(tenant)
    now = timezone.now()
    return _set_suspension(
        actor,
        tenant,
        "tenant.suspend",
        suspended_at=tenant.suspended_at or now,
        suspension_reason=reason,
        reads_until=now + timedelta(seconds=read_grace_seconds),
    )


@transaction.atomic
def resume_tenant(actor: Actor, tenant: Tenant) -> Tenant:
    if not actor.is_staff:
        raise NotPermitted("only operators (staff) resume tenants")
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    ensure_not_deleting(tenant)
    if tenant.suspended_at is None:
        return tenant
    return _set_suspension(
        actor, tenant, "tenant.resume", suspended_at=None, suspension_reason="", reads_until=None
    )


def _set_suspension(actor: Actor, tenant: Tenant, action: str, **fields: Any) -> Tenant:
    """Store the suspension fields, tell the brokers, and audit ``action``."""
    before = suspension_snapshot(tenant)
    for name, value in fields.items():
        setattr(tenant, name, value)
    tenant.save(update_fields=list(fields))
    notify_metadata_changed("tenant.updated", tenant=tenant.pk)
    record_event(
        actor,
        tenant=tenant,
        action=action,
        object_type="tenant",
        object_id=tenant.pk,
        object_repr=tenant.slug,
        before=before,
        after=suspension_snapshot(tenant),
    )
    return tenant


def _actor_may_manage(actor: Actor, tenant: Tenant, *, target_role: str) -> None:
    """Admins manage members up to admin; only owners (or the system) touch owners."""
    if actor.user is None and actor.api_key is None:
        return  # system
    if actor.api_key is not None:
        raise NotPermitted("API keys cannot manage tenant members")
    role = role_of(actor.user, tenant)
    if role is None or not Role.at_least(role, Role.ADMIN):
        raise NotPermitted("managing members needs the admin or owner role")
    if target_role == Role.OWNER and role != Role.OWNER:
        raise NotPermitted("only owners can grant, change or remove the owner role")


def _validate_role(role: str) -> None:
    if role not in Role.values:
        raise InvalidInput(f"role must be one of: {', '.join(Role.values)}", field="role")


@transaction.atomic
def add_member(actor: Actor, tenant: Tenant, *, user: AbstractBaseUser, role: str) -> Membership:
    _validate_role(role)
    _actor_may_manage(actor, tenant, target_role=role)
    ensure_not_deleting(tenant)
    if Membership.objects.filter(tenant=tenant, user=user).exists():
        raise AlreadyExists(
            f"{user.get_username()} is already a member of {tenant.slug}", field="username"
        )
    membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    record_event(
        actor,
        tenant=tenant,
        action="member.add",
        object_type="membership",
        object_id=membership.pk,
        object_repr=user.get_username(),
        after=membership_snapshot(membership),
    )
    return membership


def _ensure_owner_remains(membership: Membership) -> None:
    others = Membership.objects.filter(tenant=membership.tenant, role=Role.OWNER).exclude(
        pk=membership.pk
    )
    if membership.role == Role.OWNER and not others.exists():
        raise InvalidInput("a tenant must keep at least one owner", field="role")


@transaction.atomic
def change_member_role(actor: Actor, membership: Membership, *, role: str) -> Membership:
    _validate_role(role)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    _actor_may_manage(actor, membership.tenant, target_role=membership.role)
    _actor_may_manage(actor, membership.tenant, target_role=role)
    before = membership_snapshot(membership)
    if role != Role.OWNER:
        _ensure_owner_remains(membership)
    membership.role = role
    membership.save(update_fields=["role"])
    record_event(
        actor,
        tenant=membership.tenant,
        action="member.change_role",
        object_type="membership",
        object_id=membership.pk,
        object_repr=membership.user.get_username(),
        before=before,
        after=membership_snapshot(membership),
    )
    return membership


@transaction.atomic
def remove_member(actor: Actor, membership: Membership) -> None:
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    _actor_may_manage(actor, membership.tenant, target_role=membership.role)
    _ensure_owner_remains(membership)
    before = membership_snapshot(membership)
    record_event(
        actor,
        tenant=membership.tenant,
        action="member.remove",
        object_type="membership",
        object_id=membership.pk,
        object_repr=membership.user.get_username(),
        before=before,
    )
    membership.delete()


@transaction.atomic
def transfer_ownership(actor: Actor, tenant: Tenant, *, to: Membership) -> Membership:
    """An owner hands the tenant to another member: they become an owner and the giver
    an admin, in one step (a tenant is never without an owner)."""
    if actor.api_key is not None or actor.user is None:
        raise NotPermitted("only a signed-in owner transfers ownership")
    giver = Membership.objects.select_for_update().filter(tenant=tenant, user=actor.user).first()
    if giver is None or giver.role != Role.OWNER:
        raise NotPermitted("only an owner transfers ownership")
    to = Membership.objects.select_for_update().select_related("user").get(pk=to.pk)
    if to.tenant_id != tenant.pk:
        raise InvalidInput("not a member of this tenant", field="member")
    if to.pk == giver.pk:
        raise InvalidInput("you own it already; choose another member", field="member")
    before = {"from": membership_snapshot(giver), "to": membership_snapshot(to)}
    to.role = Role.OWNER
    to.save(update_fields=["role"])
    giver.role = Role.ADMIN
    giver.save(update_fields=["role"])
    record_event(
        actor,
        tenant=tenant,
        action="member.transfer_ownership",
        object_type="membership",
        object_id=to.pk,
        object_repr=to.user.get_username(),
        before=before,
        after={"from": membership_snapshot(giver), "to": membership_snapshot(to)},
    )
    return to


@transaction.atomic
def leave(actor: Actor, tenant: Tenant) -> None:
    """The actor stops being a member; the last owner must hand the tenant on first."""
    if actor.api_key is not None or actor.user is None:
        raise NotPermitted("only a signed-in member leaves a tenant")
    membership = (
        Membership.objects.select_for_update().filter(tenant=tenant, user=actor.user).first()
    )
    if membership is None:
        raise InvalidInput("you are not a member of this tenant")
    others = Membership.objects.filter(tenant=tenant, role=Role.OWNER).exclude(pk=membership.pk)
    if membership.role == Role.OWNER and not others.exists():
        raise InvalidInput(
            "you are its only owner: transfer ownership to another member first",
            field="role",
        )
    record_event(
        actor,
        tenant=tenant,
        action="member.leave",
        object_type="membership",
        object_id=membership.pk,
        object_repr=actor.user.get_username(),
        before=membership_snapshot(membership),
    )
    membership.delete()


# What a tenant admin is told after asking to add someone, whether or not an account with
# that name exists or is already a member: until invitations that the invitee accepts
# (Step 15), the answer must not tell which accounts exist.
NEUTRAL_ADD_MESSAGE = (
    "If an account with that username or email exists, it is now a member of this tenant."
)


def add_member_quietly(
    actor: Actor, tenant: Tenant, *, user: AbstractBaseUser | None, role: str
) -> Membership | None:
    """``add_member`` for a caller who must not learn whether ``user`` exists: the same
    checks of the role and the caller's rights first, then nothing for no user or an
    existing member, the membership otherwise."""
    _validate_role(role)
    _actor_may_manage(actor, tenant, target_role=role)
    if user is None or Membership.objects.filter(tenant=tenant, user=user).exists():
        return None
    return add_member(actor, tenant, user=user, role=role)


def find_user(username: str, *, field: str = "username") -> AbstractBaseUser:
    user_model = get_user_model()
    try:
        return user_model.objects.get(**{user_model.USERNAME_FIELD: username})
    except user_model.DoesNotExist:
        raise InvalidInput(f"no user named {username!r}", field=field) from None


def _entity_columns(entity: client_quotas.Entity) -> dict[str, str]:
    names = dict(entity)
    columns = {}
    for entity_type, column in (
        (client_quotas.USER, "user"),
        (client_quotas.CLIENT_ID, "client_id"),
    ):
        if entity_type not in names:
            columns[column] = ""
        else:
            name = names[entity_type]
            columns[column] = client_quotas.DEFAULT_NAME if name is None else name
    return columns


def quota_entity(user: str, client_id: str) -> client_quotas.Entity:
    """The entity of a stored row's ``user`` and ``client_id`` columns."""
    pairs: list[tuple[str, str | None]] = []
    if client_id:
        pairs.append(
            (
                client_quotas.CLIENT_ID,
                None if client_id == client_quotas.DEFAULT_NAME else client_id,
            )
        )
    if user:
        pairs.append((client_quotas.USER, None if user == client_quotas.DEFAULT_NAME else user))
    return tuple(pairs)


def tenant_client_quotas(rows: Iterable[ClientQuota]) -> tuple[client_quotas.ClientQuota, ...]:
    """The client quotas of one tenant's rows (in the models' order)."""
    values: dict[client_quotas.Entity, dict[str, float]] = {}
    for row in rows:
        values.setdefault(quota_entity(row.user, row.client_id), {})[row.key] = row.value
    return tuple(client_quotas.ClientQuota(e, v) for e, v in values.items())


@transaction.atomic
def alter_client_quotas(
    actor: Actor,
    tenant: Tenant,
    *,
    entity: client_quotas.Entity,
    changes: dict[str, float | None],
) -> dict[str, float]:
    """Set (a value) or remove (None) quota keys of one entity of the tenant, each checked
    against the tenant's byte rates; the entity's values after. The caller authorizes
    (the broker: ALTER_CONFIGS on the tenant's cluster resource). Audited; brokers learn
    of it with the tenant's metadata."""
    try:
        entity = client_quotas.make_entity(entity)
    except client_quotas.InvalidQuota as exc:
        raise InvalidInput(str(exc), field="entity") from None
    # One writer per tenant at a time, checking against its current limits.
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    columns = _entity_columns(entity)
    rows = {q.key: q for q in ClientQuota.objects.filter(tenant=tenant, **columns)}
    before = {key: row.value for key, row in rows.items()}
    limits = client_quotas.ceilings(tenant.produce_byte_rate, tenant.fetch_byte_rate)
    try:
        after = client_quotas.altered(before, changes, limits)
    except client_quotas.QuotaAboveCeiling as exc:
        raise LimitExceeded(str(exc), field="value") from None
    except client_quotas.InvalidQuota as exc:
        raise InvalidInput(str(exc), field="key") from None
    for key, row in rows.items():
        if key not in after:
            row.delete()
    for key, value in after.items():
        if before.get(key) != value:
            ClientQuota.objects.update_or_create(
                tenant=tenant, key=key, **columns, defaults={"value": value}
            )
    if after != before:
        notify_metadata_changed("tenant.client_quotas_changed", tenant=tenant.pk)
        record_event(
            actor,
            tenant=tenant,
            action="tenant.alter_client_quotas",
            object_type="client_quota",
            object_id=f"{columns['user']}/{columns['client_id']}",
            object_repr=f"user={columns['user']!r} client-id={columns['client_id']!r}",
            before=before,
            after=after,
        )
    return after
