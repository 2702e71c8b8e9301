"""The audit log: the tenant's events, newest first, filtered and paged by keyset.

Admins only, as the API's audit endpoint (``policy.AUDIT_NEEDS``). The filters are the
API's (``action``, ``object_type``, ``actor``, ``since``/``until``) plus "resource name
contains"; they live in the query string, so a filtered page is a plain GET URL that htmx
swaps in place.

Pages are keyed on ``(created_at, id)`` of the last row shown (``?before=<id>``): new
events arriving at the top do not shift the older pages, as offsets would. Snapshots
never hold secrets (the services' ``*_snapshot`` functions leave them out); the page shows
what is stored.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.db.models import Q, QuerySet
from django.http import HttpResponse
from django.urls import reverse

from control_plane.access import policy
from control_plane.audit.models import AuditEvent
from control_plane.core.errors import InvalidInput, ServiceError
from frontend.console import Page, form_errors, member_view
from frontend.units import utc_time

NEEDS = policy.AUDIT_NEEDS
PAGE_SIZE = 50
FILTERS = ("action", "object_type", "actor", "name", "since", "until")
_MISSING = object()


def _filtered(page: Page, form: dict[str, str]) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.filter(tenant=page.tenant)
    for field in ("action", "object_type", "actor"):
        if form[field]:
            events = events.filter(**{field: form[field]})
    if form["name"]:
        events = events.filter(object_repr__icontains=form["name"])
    since, until = utc_time(form["since"], "since"), utc_time(form["until"], "until")
    if since is not None:
        events = events.filter(created_at__gte=since)
    if until is not None:
        events = events.filter(created_at__lt=until)
    return events.order_by("-created_at", "-id")


def _older_than(events: QuerySet[AuditEvent], page: Page, cursor: str) -> QuerySet[AuditEvent]:
    """Events after the row ``cursor`` names in the newest-first order."""
    last = None
    if cursor.isdigit():
        last = AuditEvent.objects.filter(tenant=page.tenant, pk=int(cursor)).first()
    if last is None:
        raise InvalidInput(
            "this page of the log no longer exists; start from the newest", field="before"
        )
    return events.filter(
        Q(created_at__lt=last.created_at) | Q(created_at=last.created_at, pk__lt=last.pk)
    )


def _pretty(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _changes(before: object, after: object) -> list[dict[str, str]]:
    """Top-level keys whose value differs, when both snapshots are objects."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    rows = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key, _MISSING), after.get(key, _MISSING)
        if old != new:
            rows.append(
                {
                    "key": key,
                    "before": "—" if old is _MISSING else json.dumps(old, default=str),
                    "after": "—" if new is _MISSING else json.dumps(new, default=str),
                }
            )
    return rows


def _row(event: AuditEvent) -> dict[str, Any]:
    return {
        "event": event,
        "changes": _changes(event.before, event.after),
        "before": None if event.before is None else _pretty(event.before),
        "after": None if event.after is None else _pretty(event.after),
    }


def _choices(page: Page, form: dict[str, str]) -> dict[str, list[str]]:
    """The actions and resource types this tenant's log holds, for the filter menus."""
    pairs = list(
        AuditEvent.objects.filter(tenant=page.tenant)
        .order_by()
        .values_list("action", "object_type")
        .distinct()
    )
    actions = {action for action, _ in pairs}
    types = {object_type for _, object_type in pairs}
    # A value from the URL that matches nothing is still shown as chosen.
    actions.update(filter(None, [form["action"]]))
    types.update(filter(None, [form["object_type"]]))
    return {"actions": sorted(actions), "object_types": sorted(types)}


@member_view("audit", role=NEEDS["list"].role)
def audit_log(page: Page) -> HttpResponse:
    form = {k: page.request.GET.get(k, "").strip() for k in FILTERS}
    cursor = page.request.GET.get("before", "").strip()
    errors: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    older_url = newest_url = None
    try:
        events = _filtered(page, form)
        if cursor:
            events = _older_than(events, page, cursor)
    except ServiceError as exc:
        errors = form_errors(exc)
    else:
        found = list(events[: PAGE_SIZE + 1])
        rows = [_row(e) for e in found[:PAGE_SIZE]]
        base = reverse("frontend:audit", kwargs={"tenant_slug": page.tenant.slug})
        query = {k: v for k, v in form.items() if v}
        if len(found) > PAGE_SIZE:
            older_url = f"{base}?{urlencode({**query, 'before': found[PAGE_SIZE - 1].pk})}"
        if cursor:
            newest_url = f"{base}?{urlencode(query)}" if query else base
    return page.render(
        "frontend/audit.html",
        {
            "form": form,
            "errors": errors,
            "rows": rows,
            "filtered": any(form.values()),
            "older_url": older_url,
            "newest_url": newest_url,
            **_choices(page, form),
        },
        partial="frontend/partials/audit_rows.html",
        # htmx 2 does not swap 4xx responses: the partial says what is wrong with status 200.
        status=400 if errors and not page.htmx else 200,
    )
