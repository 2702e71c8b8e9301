"""The tenant's usage page (every member) and the operators' usage of every tenant: the
hourly rows of ``control_plane.usage`` over a period, as a chart (bytes per hour or day)
and tables by topic and by service account (chargeback), with CSV export through the
REST API. docs/usage.md."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from control_plane.usage import services as usage
from frontend.cluster import _page, operator_view
from frontend.console import Page, member_view

DAY_CHOICES = (1, 7, 30)


def _period(request: HttpRequest) -> tuple[int, datetime, datetime]:
    raw = request.GET.get("days", "7")
    days = int(raw) if raw.isdigit() and int(raw) in DAY_CHOICES else 7
    end = timezone.now()
    start, end = usage.period(end - timedelta(days=days), end)
    return days, start, end


def _shares(rows: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """Rows with ``share`` (percent of the field's total), largest first."""
    total = sum(r[field] for r in rows) or 1
    return sorted(
        ({**r, "share": round(100 * r[field] / total, 1)} for r in rows),
        key=lambda r: -r[field],
    )


def _csv(path: str, start: datetime, end: datetime) -> str:
    query = urlencode({"format": "csv", "start": start.isoformat(), "end": end.isoformat()})
    return f"{path}?{query}"


def _chart(rows: list[dict[str, Any]], days: int) -> dict[str, Any]:
    """Bytes produced and fetched per hour (one day) or per day, in MB."""
    buckets: dict[int, list[int]] = {}
    for r in rows:
        at = datetime.fromisoformat(r["hour"])
        if days > 1:
            at = at.replace(hour=0)
        x = int(at.timestamp())
        bucket = buckets.setdefault(x, [0, 0])
        bucket[0] += r["produce_bytes"]
        bucket[1] += r["fetch_bytes"]
    xs = sorted(buckets)
    return {
        "x": xs,
        "series": [
            {"label": "Produced (MB)", "values": [buckets[x][0] / 1e6 for x in xs], "scale": "MB"},
            {"label": "Fetched (MB)", "values": [buckets[x][1] / 1e6 for x in xs], "scale": "MB"},
        ],
    }


@member_view("usage")
def tenant_usage(page: Page) -> HttpResponse:
    days, start, end = _period(page.request)
    tenants = [page.tenant]
    topics = usage.usage(tenants, start, end, "topic")
    principals = usage.usage(tenants, start, end, "principal")
    hours = usage.usage(tenants, start, end, "hour")
    return page.render(
        "frontend/usage.html",
        {
            "days": days,
            "day_choices": DAY_CHOICES,
            "start": start,
            "end": end,
            "totals": usage.totals(topics),
            "requests": sum(r["requests"] for r in principals),
            "topics": _shares(topics, "produce_bytes"),
            "principals": _shares(principals, "produce_bytes"),
            "chart": _chart(hours, days),
            "csv": _csv(f"/api/v1/tenants/{page.tenant.slug}/usage/", start, end),
        },
    )


@operator_view
def cluster_usage(request: HttpRequest) -> HttpResponse:
    days, start, end = _period(request)
    tenants = usage.usage(None, start, end, "tenant")
    return _page(
        request,
        "frontend/operators_usage.html",
        {
            "days": days,
            "day_choices": DAY_CHOICES,
            "start": start,
            "end": end,
            "tenants": _shares(tenants, "produce_bytes"),
            "totals": usage.totals(tenants),
            "csv": _csv("/api/v1/usage/", start, end),
        },
    )
