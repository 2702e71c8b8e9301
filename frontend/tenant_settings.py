"""The tenant's settings page: what it is, its plan and limits, its people, alerts and
usage at a glance (each linking to its page), and (owners) deleting it.

Deleting asks for the tenant's slug typed again, then shows the job's progress on a page
of its own (``deletion``), which outlives the tenant.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from control_plane.accounts.models import Invitation
from control_plane.alerts.models import AlertRule, AlertState
from control_plane.core.errors import ServiceError
from control_plane.lifecycle import services as lifecycle
from control_plane.lifecycle.models import STEPS, DeletionState, TenantDeletion
from control_plane.tenancy.models import Membership, Role
from control_plane.usage import services as usage
from frontend.console import Page, form_errors, member_view


def _overview(page: Page) -> dict[str, Any]:
    """Counts for the page's links: people, open invitations, alerts firing, usage."""
    tenant = page.tenant
    end = timezone.now()
    start, end = usage.period(end - timedelta(days=30), end)
    return {
        "members": Membership.objects.filter(tenant=tenant).count(),
        "invitations": Invitation.objects.filter(
            tenant=tenant, accepted_at__isnull=True, revoked_at__isnull=True
        ).count(),
        "rules": AlertRule.objects.filter(tenant=tenant).count(),
        "firing": AlertState.objects.filter(rule__tenant=tenant, firing=True).count(),
        "used": usage.totals(usage.usage([tenant], start, end, "topic")),
    }


def _render(page: Page, errors: dict[str, str] | None = None, status: int = 200) -> HttpResponse:
    return page.render(
        "frontend/tenant_settings.html",
        {
            **_overview(page),
            "errors": errors or {},
            "may_delete": page.role == Role.OWNER,
            "retention_hours": (
                f"{page.tenant.max_retention_ms / 3_600_000:g}"
                if page.tenant.max_retention_ms
                else None
            ),
        },
        status=status,
    )


@member_view("settings")
def tenant_settings(page: Page) -> HttpResponse:
    return _render(page)


@require_POST
@member_view("settings", Role.OWNER)
def tenant_delete(page: Page) -> HttpResponse:
    try:
        deletion = lifecycle.request_deletion(
            page.actor, page.tenant, confirm=page.request.POST.get("confirm", "")
        )
    except ServiceError as exc:
        return _render(page, form_errors(exc), status=400)
    return redirect("frontend:deletion", deletion_id=deletion.pk)


@login_required
def deletion(request: HttpRequest, deletion_id: str) -> HttpResponse:
    """A deletion's progress, for the person who asked for it and operators."""
    found = TenantDeletion.objects.filter(pk=deletion_id).first()
    if found is None:
        raise Http404("no such deletion")
    if not request.user.is_staff and found.requested_by_id != request.user.pk:
        raise PermissionDenied("only the person who deleted the tenant follows its deletion")
    current = STEPS.index(found.step) if found.step in STEPS else -1
    done = found.state == DeletionState.DONE
    steps = [
        {
            "name": step,
            "state": "done" if done or i < current else "current" if i == current else "waiting",
            "progress": found.progress.get(step, {}),
        }
        for i, step in enumerate(STEPS)
    ]
    return render(
        request,
        "frontend/deletion.html",
        {"deletion": found, "steps": steps, "done": done},
    )
