"""The tenant's settings page: what it is and its limits, and (owners) deleting it.

Deleting asks for the tenant's slug typed again, then shows the job's progress on a page
of its own (``deletion``), which outlives the tenant.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from control_plane.core.errors import ServiceError
from control_plane.lifecycle import services as lifecycle
from control_plane.lifecycle.models import STEPS, DeletionState, TenantDeletion
from control_plane.tenancy.models import Role
from frontend.console import Page, form_errors, member_view


def _render(page: Page, errors: dict[str, str] | None = None, status: int = 200) -> HttpResponse:
    return page.render(
        "frontend/tenant_settings.html",
        {
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
