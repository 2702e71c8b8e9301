"""Consumer group pages: the list (worst lag first), the detail page (state, members,
assignments, committed offsets, lag in records and seconds, the lag history chart), offset
reset with a preview and a confirmation, and delete.

Lag and reset plans come from ``control_plane.groups.lag`` and changes go through
``control_plane.groups.services``, as in the REST API (same rules, same audit events).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import messages
from django.db.models import Max, Sum
from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from control_plane.access import policy
from control_plane.core.errors import InvalidInput, ServiceError
from control_plane.groups import lag as group_lag
from control_plane.groups import services as group_services
from control_plane.groups.models import ConsumerGroup, LagSample
from frontend.console import Page, form_errors, member_view
from frontend.units import epoch_ms, whole_number

NEEDS = policy.GROUP_NEEDS
HISTORY_HOURS = (1, 6, 24)


def _group(page: Page, group_id: str) -> ConsumerGroup:
    return page.owned(ConsumerGroup.objects.all(), "consumer group", group_id=group_id)


def _back_to(page: Page, group: ConsumerGroup) -> HttpResponse:
    return redirect("frontend:group", tenant_slug=page.tenant.slug, group_id=group.group_id)


def worst_lag_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        rows,
        key=lambda r: (-(r["max_lag_seconds"] or 0), -(r["total_lag"] or 0), r["group_id"]),
    )


@member_view("groups", role=NEEDS["list"].role)
def group_list(page: Page) -> HttpResponse:
    query = page.request.GET.get("q", "").strip()
    groups = ConsumerGroup.objects.filter(tenant=page.tenant).order_by("group_id")
    if query:
        groups = groups.filter(group_id__icontains=query)
    rows = worst_lag_first(group_lag.summaries(page.tenant, groups))
    failure = next((r["offsets_error"] for r in rows if r["offsets_error"]), None)
    return page.render(
        "frontend/groups.html",
        {"groups": rows, "q": query, "offsets_failure": failure},
        partial="frontend/partials/group_rows.html",
    )


def lag_history(group: ConsumerGroup, hours: int) -> dict[str, Any]:
    """The chart's data: total lag (records) and the worst lag (seconds) per sample time."""
    since = timezone.now() - timedelta(hours=hours)
    points = (
        LagSample.objects.filter(group=group, at__gte=since)
        .values("at")
        .annotate(records=Sum("lag"), seconds=Max("lag_seconds"))
        .order_by("at")
    )
    x, records, seconds = [], [], []
    for p in points:
        x.append(p["at"].timestamp())
        records.append(p["records"])
        seconds.append(p["seconds"])
    return {
        "x": x,
        "series": [
            {"label": "Lag (records)", "values": records, "scale": "records"},
            {"label": "Lag (seconds)", "values": seconds, "scale": "seconds"},
        ],
    }


@member_view("groups", role=NEEDS["retrieve"].role)
def group_detail(page: Page, group_id: str) -> HttpResponse:
    group = _group(page, group_id)
    detail = group_lag.describe(page.tenant, group)
    try:
        hours = int(page.request.GET.get("hours", "1"))
    except ValueError:
        hours = 1
    if hours not in HISTORY_HOURS:
        hours = 1
    history = lag_history(group, hours)
    return page.render(
        "frontend/group_detail.html",
        {
            "group": group,
            "detail": detail,
            "history": history,
            "history_rows": list(
                zip(
                    [datetime.fromtimestamp(t, tz=UTC) for t in history["x"]],
                    history["series"][0]["values"],
                    history["series"][1]["values"],
                    strict=True,
                )
            )[-20:],
            "hours": hours,
            "hour_choices": HISTORY_HOURS,
            "topics": sorted({o["topic"] for o in detail["offsets"]}),
            "reset_to": group_services.RESET_TO,
            "form": {"to": "earliest", "topic": "", "timestamp": "", "offset": ""},
            "errors": {},
        },
    )


def _reset_request(page: Page, group: ConsumerGroup) -> tuple[dict[str, str], dict[str, Any]]:
    """(the form as sent, plan_reset's arguments); InvalidInput names the field."""
    post = page.request.POST
    form = {k: post.get(k, "").strip() for k in ("to", "topic", "timestamp", "offset")}
    if form["to"] not in group_services.RESET_TO:
        raise InvalidInput(f"choose one of {', '.join(group_services.RESET_TO)}", field="to")
    args: dict[str, Any] = {"to": form["to"]}
    if form["topic"]:
        args["topics"] = [{"topic": form["topic"]}]
    if form["to"] == "timestamp":
        args["timestamp_ms"] = epoch_ms(form["timestamp"], "timestamp")
    if form["to"] == "offset":
        args["offset"] = whole_number(form["offset"], "offset", 0)
    return form, args


@require_POST
@member_view("groups", role=NEEDS["reset_offsets"].role)
def group_reset(page: Page, group_id: str) -> HttpResponse:
    """Preview a reset (``preview``), or apply the previewed offsets (``confirm``)."""
    group = _group(page, group_id)
    if page.request.POST.get("confirm"):
        # "topic:partition=offset" as the preview wrote them (topic names have no ":").
        offsets: dict[tuple[str, int], int] = {}
        for raw in page.request.POST.getlist("offset_for"):
            topic, _, rest = raw.partition(":")
            partition, _, offset = rest.partition("=")
            if not (topic and partition.isdigit() and offset.isdigit()):
                messages.error(page.request, "The reset was not understood: preview it again.")
                return _back_to(page, group)
            offsets[(topic, int(partition))] = int(offset)
        if not offsets:
            messages.error(page.request, "Nothing to reset: preview the reset first.")
            return _back_to(page, group)
        page.act(
            lambda: group_services.reset_offsets(page.actor, page.tenant, group.group_id, offsets),
            f"Reset {len(offsets)} committed offset{'s' if len(offsets) != 1 else ''} "
            f"of {group.group_id}.",
        )
        return _back_to(page, group)
    form: dict[str, str] = {}
    try:
        form, args = _reset_request(page, group)
        group_services.ensure_inactive(group, "reset offsets of")
        plan = group_lag.plan_reset(page.tenant, group, **args)
    except ServiceError as exc:
        # Shown on the group's page beside the reset form, with what was chosen; a refusal
        # about the group itself (it has members) is the form's error.
        errors = form_errors(exc, {"topics": "topic", "group_id": "form"})
        detail = group_lag.describe(page.tenant, group)
        return page.render(
            "frontend/group_detail.html",
            {
                "group": group,
                "detail": detail,
                "history": lag_history(group, 1),
                "hours": 1,
                "hour_choices": HISTORY_HOURS,
                "topics": sorted({o["topic"] for o in detail["offsets"]}),
                "reset_to": group_services.RESET_TO,
                "form": form or dict(page.request.POST.items()),
                "errors": errors,
            },
            status=400,
        )
    return page.render(
        "frontend/group_reset.html",
        {"group": group, "plan": plan, "form": form},
    )


@require_POST
@member_view("groups", role=NEEDS["destroy"].role)
def group_delete(page: Page, group_id: str) -> HttpResponse:
    group = _group(page, group_id)
    if page.request.POST.get("confirm", "") != group.group_id:
        messages.error(page.request, f"Type the group's id ({group.group_id}) to delete it.")
        return _back_to(page, group)
    if not page.act(
        lambda: group_services.delete_group(page.actor, page.tenant, group.group_id),
        f"Consumer group {group.group_id} deleted.",
    ):
        return _back_to(page, group)
    return redirect("frontend:groups", tenant_slug=page.tenant.slug)
