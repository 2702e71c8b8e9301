"""The tenant overview: topics, partitions, storage against the limit, throughput over
time, the consumer groups lagging most, and (for admins) the latest audit events."""

from __future__ import annotations

from django.db.models import Sum
from django.http import HttpResponse

from control_plane.audit.models import AuditEvent
from control_plane.catalog import usage
from control_plane.catalog.models import Topic
from control_plane.groups import lag as group_lag
from control_plane.groups.models import ConsumerGroup
from control_plane.tenancy.models import Role
from frontend.console import Page, member_view
from frontend.groups import HISTORY_HOURS, worst_lag_first

WORST_GROUPS = 5
RECENT_EVENTS = 8


@member_view("overview")
def overview(page: Page) -> HttpResponse:
    tenant = page.tenant
    topic_count = Topic.objects.filter(tenant=tenant).count()
    # Sizes as the last sampling pass (each minute) measured them; before the first one,
    # from the brokers. Lag is always asked live, on one connection for every group.
    sizes, sized_at = usage.sampled_sizes(tenant)
    sizes_failure = None
    with group_lag.Brokers(tenant) as brokers:
        if sized_at is None and topic_count:
            if brokers.client is not None:
                topics = list(Topic.objects.filter(tenant=tenant))
                sizes, sizes_failure = usage.topic_sizes(tenant, topics, brokers.client)
            else:
                sizes_failure = brokers.failure
        groups = worst_lag_first(
            group_lag.summaries(
                tenant, ConsumerGroup.objects.filter(tenant=tenant), brokers=brokers
            )
        )
    used = sum(sizes.values())
    try:
        hours = int(page.request.GET.get("hours", "1"))
    except ValueError:
        hours = 1
    if hours not in HISTORY_HOURS:
        hours = 1
    events = []
    if page.may(Role.ADMIN):
        events = list(
            AuditEvent.objects.filter(tenant=tenant).order_by("-created_at")[:RECENT_EVENTS]
        )
    return page.render(
        "frontend/overview.html",
        {
            "topic_count": topic_count,
            "sized_at": sized_at,
            "partition_count": Topic.objects.filter(tenant=tenant).aggregate(
                n=Sum("partition_count")
            )["n"]
            or 0,
            "partition_limit": tenant.max_partitions,
            "storage_used": used,
            "storage_limit": tenant.max_storage_bytes,
            "storage_percent": round(100 * used / tenant.max_storage_bytes, 1),
            "sizes_failure": sizes_failure,
            "largest": sorted(sizes.items(), key=lambda kv: -kv[1])[:5],
            "throughput": usage.throughput(tenant, hours),
            "hours": hours,
            "hour_choices": HISTORY_HOURS,
            "groups": groups[:WORST_GROUPS],
            "group_count": len(groups),
            "events": events,
        },
    )
