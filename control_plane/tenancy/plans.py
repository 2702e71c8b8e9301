"""Plans: named sets of limits, defined by operators (docs/accounts.md, "Plans").

A tenant on a plan has the plan's limits copied into its own columns, where every
enforcement point already reads them (brokers: byte rates, storage, partitions,
connections, retention; services: partitions, connectors). Changing a plan changes every
tenant on it in the same transaction, and each tenant's metadata reaches the brokers: no
restart. Every change is audited: the plan's (cluster level) and each tenant's.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count

from control_plane.audit.services import record_event
from control_plane.core.actor import Actor
from control_plane.core.errors import AlreadyExists, Conflict, InvalidInput, NotPermitted
from control_plane.tenancy.models import SLUG_VALIDATOR, Plan, Tenant
from control_plane.tenancy.services import (
    NULLABLE_LIMITS,
    PLAN_LIMITS,
    check_limits,
    is_operator,
    plan_limits,
    save_tenant_change,
    tenant_snapshot,
)

REQUIRED = tuple(f for f in PLAN_LIMITS if f not in NULLABLE_LIMITS)


def plan_snapshot(plan: Plan) -> dict[str, Any]:
    return {
        "slug": plan.slug,
        "name": plan.name,
        "description": plan.description,
        "is_default": plan.is_default,
        **plan_limits(plan),
    }


def plans_with_counts() -> Any:
    return Plan.objects.annotate(tenant_count=Count("tenants"))


def _staff(actor: Actor) -> None:
    if not is_operator(actor):
        raise NotPermitted("only operators (staff) manage plans")


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidInput("1 to 100 characters", field="name")
    return name


def _set_default(plan: Plan) -> None:
    """Make ``plan`` the one default plan."""
    Plan.objects.filter(is_default=True).exclude(pk=plan.pk).update(is_default=False)


@transaction.atomic
def create_plan(
    actor: Actor,
    *,
    slug: str,
    name: str,
    limits: dict[str, int | None],
    description: str = "",
    is_default: bool = False,
) -> Plan:
    _staff(actor)
    try:
        SLUG_VALIDATOR(slug)
    except ValidationError as exc:
        raise InvalidInput(exc.messages[0], field="slug") from None
    name = _check_name(name)
    missing = [f for f in REQUIRED if limits.get(f) is None]
    if missing:
        raise InvalidInput(f"{missing[0]} is required", field=missing[0])
    check_limits(limits, fields=PLAN_LIMITS)
    if Plan.objects.filter(slug=slug).exists():
        raise AlreadyExists(f"a plan named {slug!r} exists already", field="slug")
    if is_default:
        Plan.objects.filter(is_default=True).update(is_default=False)
    try:
        with transaction.atomic():
            plan = Plan.objects.create(
                slug=slug,
                name=name,
                description=description.strip()[:300],
                is_default=is_default,
                **limits,
            )
    except IntegrityError:
        raise AlreadyExists(f"a plan named {slug!r} exists already", field="slug") from None
    record_event(
        actor,
        tenant=None,
        action="plan.create",
        object_type="plan",
        object_id=plan.pk,
        object_repr=plan.slug,
        after=plan_snapshot(plan),
    )
    return plan


@transaction.atomic
def update_plan(
    actor: Actor,
    plan: Plan,
    *,
    name: str | None = None,
    description: str | None = None,
    is_default: bool | None = None,
    limits: dict[str, int | None] | None = None,
) -> Plan:
    """Change a plan; every tenant on it gets the new limits at once. Returns the plan."""
    _staff(actor)
    plan = Plan.objects.select_for_update().get(pk=plan.pk)
    before = plan_snapshot(plan)
    if name is not None:
        plan.name = _check_name(name)
    if description is not None:
        plan.description = description.strip()[:300]
    if limits:
        required = [f for f in REQUIRED if f in limits and limits[f] is None]
        if required:
            raise InvalidInput(f"{required[0]} is required", field=required[0])
        check_limits(limits, fields=PLAN_LIMITS)
        for field, value in limits.items():
            setattr(plan, field, value)
    if is_default is not None:
        if is_default:
            _set_default(plan)
        plan.is_default = is_default
    if plan_snapshot(plan) == before:
        return plan
    plan.save()
    changed = _apply_to_tenants(actor, plan) if plan_limits(plan) != _limits_of(before) else 0
    record_event(
        actor,
        tenant=None,
        action="plan.update",
        object_type="plan",
        object_id=plan.pk,
        object_repr=plan.slug,
        before=before,
        after={**plan_snapshot(plan), "tenants_changed": changed},
    )
    return plan


def _limits_of(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {field: snapshot[field] for field in PLAN_LIMITS}


def _apply_to_tenants(actor: Actor, plan: Plan) -> int:
    """Copy the plan's limits into each of its tenants; brokers are told per tenant."""
    limits = plan_limits(plan)
    changed = 0
    for tenant in Tenant.objects.select_for_update().filter(plan=plan).order_by("pk"):
        before = tenant_snapshot(tenant)
        for field, value in limits.items():
            setattr(tenant, field, value)
        if tenant.default_partitions is not None:
            tenant.default_partitions = min(tenant.default_partitions, tenant.max_partitions)
        changed += save_tenant_change(actor, tenant, before)
    return changed


@transaction.atomic
def delete_plan(actor: Actor, plan: Plan) -> None:
    _staff(actor)
    plan = Plan.objects.select_for_update().get(pk=plan.pk)
    used = Tenant.objects.filter(plan=plan).count()
    if used:
        raise Conflict(f"{used} tenants are on plan {plan.slug!r}: move them to another first")
    record_event(
        actor,
        tenant=None,
        action="plan.delete",
        object_type="plan",
        object_id=plan.pk,
        object_repr=plan.slug,
        before=plan_snapshot(plan),
    )
    plan.delete()


def find_plan(slug: str, *, field: str = "plan") -> Plan:
    plan = Plan.objects.filter(slug=slug).first()
    if plan is None:
        raise InvalidInput(f"no plan named {slug!r}", field=field)
    return plan
