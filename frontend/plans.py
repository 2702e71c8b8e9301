"""The operators' plans (staff users): every plan with its limits and how many tenants
are on it, a form to make one, one to change it (every tenant on it changes at once), and
moving a tenant to a plan. ``control_plane.tenancy.plans`` does the work, audited as over
REST. Limits are entered in the units people think in (GiB, MiB/s, hours) and stored in
bytes and milliseconds."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from control_plane.core.errors import InvalidInput, ServiceError
from control_plane.tenancy import plans
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Plan, Tenant
from frontend.cluster import _actor, _page, operator_view
from frontend.console import form_errors

GIB = 2**30
MIB = 2**20
HOUR_MS = 3600 * 1000
# form field -> (limit, unit factor, label, nullable)
FIELDS = [
    ("max_partitions", "max_partitions", 1, "Partitions", False),
    ("storage_gib", "max_storage_bytes", GIB, "Storage per broker (GiB)", False),
    ("produce_mib", "produce_byte_rate", MIB, "Produce rate (MiB/s)", False),
    ("fetch_mib", "fetch_byte_rate", MIB, "Fetch rate (MiB/s)", False),
    ("max_connections", "max_connections", 1, "Connections per broker", False),
    (
        "retention_hours",
        "max_retention_ms",
        HOUR_MS,
        "Longest retention (hours; empty: none)",
        True,
    ),
    ("max_connectors", "max_connectors", 1, "Connectors", False),
    ("max_connector_tasks", "max_connector_tasks", 1, "Connector tasks", False),
]


def _limits(post: QueryDict) -> dict[str, int | None]:
    limits: dict[str, int | None] = {}
    for name, limit, factor, label, nullable in FIELDS:
        raw = post.get(name, "").strip()
        if not raw and nullable:
            limits[limit] = None
            continue
        try:
            value = float(raw)
        except ValueError:
            raise InvalidInput(f"{label}: a number", field=name) from None
        if value <= 0:
            raise InvalidInput(f"{label}: more than 0", field=name)
        limits[limit] = round(value * factor)
    return limits


def _form_values(plan: Plan | None) -> dict[str, Any]:
    if plan is None:
        return {}
    values: dict[str, Any] = {"slug": plan.slug, "name": plan.name}
    values["description"] = plan.description
    values["is_default"] = plan.is_default
    for name, limit, factor, _, _ in FIELDS:
        value = getattr(plan, limit)
        values[name] = "" if value is None else f"{value / factor:g}"
    return values


def _fields(values: dict[str, Any], errors: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {"name": name, "label": label, "value": values.get(name, ""), "error": errors.get(name)}
        for name, _, _, label, _ in FIELDS
    ]


def _error_field(exc: ServiceError) -> dict[str, str]:
    """The service names limits; the form has unit fields."""
    by_limit = {limit: name for name, limit, _, _, _ in FIELDS}
    return form_errors(exc, by_limit)


@operator_view
def plan_list(request: HttpRequest) -> HttpResponse:
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    status = 200
    if request.method == "POST":
        values = request.POST.dict()
        try:
            plan = plans.create_plan(
                _actor(request),
                slug=request.POST.get("slug", "").strip(),
                name=request.POST.get("name", ""),
                description=request.POST.get("description", ""),
                is_default=request.POST.get("is_default") == "on",
                limits=_limits(request.POST),
            )
        except ServiceError as exc:
            errors, status = _error_field(exc), 400
        else:
            messages.success(request, f"Plan {plan.slug} created.")
            return redirect("frontend:operators-plans")
    rows = [
        {"plan": p, "values": _form_values(p)} for p in plans.plans_with_counts().order_by("slug")
    ]
    response = _page(
        request,
        "frontend/operators_plans.html",
        {"plans": rows, "fields": _fields(values, errors), "values": values, "errors": errors},
    )
    response.status_code = status
    return response


@operator_view
def plan_edit(request: HttpRequest, slug: str) -> HttpResponse:
    plan = get_object_or_404(Plan, slug=slug)
    errors: dict[str, str] = {}
    values = _form_values(plan)
    status = 200
    if request.method == "POST":
        values = {**request.POST.dict(), "slug": plan.slug}
        try:
            if request.POST.get("delete"):
                plans.delete_plan(_actor(request), plan)
                messages.success(request, f"Plan {plan.slug} deleted.")
                return redirect("frontend:operators-plans")
            plans.update_plan(
                _actor(request),
                plan,
                name=request.POST.get("name", ""),
                description=request.POST.get("description", ""),
                is_default=request.POST.get("is_default") == "on",
                limits=_limits(request.POST),
            )
        except ServiceError as exc:
            errors, status = _error_field(exc), 400
        else:
            messages.success(request, f"Plan {plan.slug} saved; its tenants have its limits now.")
            return redirect("frontend:operators-plans")
    response = _page(
        request,
        "frontend/operators_plan_edit.html",
        {
            "plan": plan,
            "tenants": Tenant.objects.filter(plan=plan).order_by("slug"),
            "fields": _fields(values, errors),
            "values": values,
            "errors": errors,
        },
    )
    response.status_code = status
    return response


@require_POST
@operator_view
def tenant_plan(request: HttpRequest, slug: str) -> HttpResponse:
    """Move a tenant to a plan."""
    tenant = get_object_or_404(Tenant, slug=slug)
    try:
        plan = plans.find_plan(request.POST.get("plan", ""))
        tenancy_services.update_tenant(_actor(request), tenant, plan=plan)
    except ServiceError as exc:
        messages.error(request, f"{tenant.slug} was not moved: {exc.message}")
    else:
        messages.success(request, f"{tenant.slug} is on plan {plan.slug} now.")
    return redirect("frontend:operators-tenants")
