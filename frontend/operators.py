"""The operators' view of tenants (staff users): each tenant with its size and people,
and suspending or resuming it. The tenancy services do the work, audited as over REST."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from control_plane.core.errors import ServiceError
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Plan, Tenant
from control_plane.usage import services as usage
from frontend.cluster import _actor, _page, operator_view


@operator_view
def tenant_list(request: HttpRequest) -> HttpResponse:
    tenants = (
        Tenant.objects.select_related("deletion", "plan")
        .annotate(
            partitions_in_use=Sum("topics__partition_count"),
            member_count=Count("memberships", distinct=True),
        )
        .order_by("slug")
    )
    end = timezone.now()
    start, end = usage.period(end - timedelta(days=30), end)
    used = {r["tenant"]: r for r in usage.usage(None, start, end, "tenant")}
    rows = [(t, used.get(t.slug)) for t in tenants]
    return _page(
        request,
        "frontend/operators_tenants.html",
        {"tenants": rows, "plans": Plan.objects.order_by("slug")},
    )


@require_POST
@operator_view
def tenant_suspend(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    hours = request.POST.get("read_grace_hours", "72").strip() or "0"
    try:
        if not hours.isdigit():
            raise ServiceError("the read grace period is a whole number of hours")
        tenancy_services.suspend_tenant(
            _actor(request),
            tenant,
            reason=request.POST.get("reason", ""),
            read_grace_seconds=int(hours) * 3600,
        )
    except ServiceError as exc:
        messages.error(request, f"{tenant.slug} was not suspended: {exc.message}")
    else:
        messages.success(request, f"{tenant.slug} is suspended.")
    return redirect("frontend:operators-tenants")


@require_POST
@operator_view
def tenant_resume(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = get_object_or_404(Tenant, slug=slug)
    try:
        tenancy_services.resume_tenant(_actor(request), tenant)
    except ServiceError as exc:
        messages.error(request, f"{tenant.slug} was not resumed: {exc.message}")
    else:
        messages.success(request, f"{tenant.slug} is active again.")
    return redirect("frontend:operators-tenants")
