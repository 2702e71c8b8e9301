"""Storing brokers' usage reports, aggregating them per hour, and reading the result
(docs/usage.md).

``ingest`` upserts a report's rows into ``UsageRaw``: a row keeps the values of the
highest report sequence seen, so a report stored twice or late changes nothing, and
each broker process (incarnation) has rows of its own, so a restart starts new rows
instead of overwriting old ones.

``aggregate`` recomputes ``UsageHour`` for every hour that has a raw row changed since
the last run: each hourly row is the sum of that hour's raw rows, replaced whole, so a
run is idempotent (running it twice, or two at once, gives the same rows) and a late
report just makes its hour be summed again. The sums are one ``INSERT ... SELECT ...
GROUP BY ... ON CONFLICT DO UPDATE`` per batch of hours, in the database.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from control_plane.tenancy.models import Tenant
from control_plane.usage.models import COUNTERS, AggregationState, UsageHour, UsageRaw
from data_plane.broker.usage import NO_TOPIC, UsageReport

# A raw row's columns, in the order ``ingest`` (and the usage benchmark's COPY) writes them.
RAW_COLUMNS = (
    "broker_id",
    "incarnation",
    "hour",
    "tenant_id",
    "topic_id",
    "topic_name",
    "principal",
    "seq",
    *COUNTERS,
    "updated_at",
)

RAW = UsageRaw._meta.db_table
HOURLY = UsageHour._meta.db_table
TENANTS = Tenant._meta.db_table
# Raw rows written this long before a run began may still be in transactions that commit
# after it read them: the next run looks back this far.
SLACK = timedelta(seconds=120)
GB = 10**9


def _hour(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def _prep(model: Any, field: str, value: Any) -> Any:
    return model._meta.get_field(field).get_db_prep_value(value, connection, prepared=False)


def ingest(broker_id: int, report: UsageReport) -> int:
    """Store a broker's report; returns the rows taken (unknown tenants' are left out)."""
    tenants = set(
        Tenant.objects.filter(id__in={r.tenant_id for r in report.rows}).values_list(
            "id", flat=True
        )
    )
    now = _prep(UsageRaw, "updated_at", timezone.now())
    rows = [
        (
            broker_id,
            report.incarnation,
            _prep(UsageRaw, "hour", _hour(r.hour)),
            r.tenant_id,
            _prep(UsageRaw, "topic_id", r.topic_id),
            r.topic_name[:249],
            r.principal[:255],
            report.seq,
            *r.values,
            now,
        )
        for r in report.rows
        if r.tenant_id in tenants
    ]
    if not rows:
        return 0
    columns = RAW_COLUMNS
    updates = ", ".join(
        f"{c} = excluded.{c}" for c in ["topic_name", "seq", *COUNTERS, "updated_at"]
    )
    # Table and column names come from the models; every value is a parameter.
    values = ", ".join(["%s"] * len(columns))
    sql = (
        f"INSERT INTO {RAW} ({', '.join(columns)}) VALUES ({values}) "  # noqa: S608
        "ON CONFLICT (broker_id, incarnation, hour, tenant_id, topic_id, principal) "
        f"DO UPDATE SET {updates} WHERE {RAW}.seq < excluded.seq"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)
    return len(rows)


def raw_totals(tenant_id: int) -> dict[str, int]:
    sums = UsageRaw.objects.filter(tenant_id=tenant_id).aggregate(*[Sum(c) for c in COUNTERS])
    return {c: int(sums[f"{c}__sum"] or 0) for c in COUNTERS}


# --- aggregation ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AggregationRun:
    hours: int
    rows: int
    seconds: float


def aggregate(*, batch_hours: int = 24) -> AggregationRun:
    """Recompute the hourly rows of every hour with raw rows changed since the last run."""
    started = time.monotonic()
    began = timezone.now()
    state, _ = AggregationState.objects.get_or_create(pk=1)
    changed = UsageRaw.objects.all()
    if state.watermark is not None:
        changed = changed.filter(updated_at__gte=state.watermark - SLACK)
    hours = sorted(set(changed.values_list("hour", flat=True).distinct()))
    rows = 0
    for i in range(0, len(hours), batch_hours):
        rows += _aggregate_hours(hours[i : i + batch_hours], began)
    seconds = time.monotonic() - started
    AggregationState.objects.filter(pk=1).update(
        watermark=began,
        last_run_at=timezone.now(),
        last_run_seconds=seconds,
        last_run_hours=len(hours),
    )
    return AggregationRun(len(hours), rows, seconds)


def _aggregate_hours(hours: Sequence[datetime], now: datetime) -> int:
    sums = ", ".join(f"SUM({c})" for c in COUNTERS)
    updates = ", ".join(f"{c} = excluded.{c}" for c in ["topic_name", *COUNTERS, "aggregated_at"])
    marks = ", ".join(["%s"] * len(hours))
    # Table and column names come from the models; every value is a parameter.
    sql = (
        f"INSERT INTO {HOURLY} (hour, tenant_id, topic_id, topic_name, principal, "  # noqa: S608
        f"{', '.join(COUNTERS)}, aggregated_at) "
        f"SELECT hour, tenant_id, topic_id, MAX(topic_name), principal, {sums}, %s "
        f"FROM {RAW} WHERE hour IN ({marks}) AND tenant_id IN (SELECT id FROM {TENANTS}) "
        "GROUP BY hour, tenant_id, topic_id, principal "
        "ON CONFLICT (hour, tenant_id, topic_id, principal) "
        f"DO UPDATE SET {updates}"
    )
    params = [_prep(UsageHour, "aggregated_at", now)]
    params += [_prep(UsageHour, "hour", h) for h in hours]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def prune() -> tuple[int, int]:
    """Delete raw rows of hours older than MILLRACE_USAGE_RAW_DAYS that were aggregated,
    and hourly rows older than MILLRACE_USAGE_KEEP_DAYS; (raw, hourly) deleted."""
    now = timezone.now()
    state = AggregationState.objects.filter(pk=1).first()
    raw = 0
    if state is not None and state.watermark is not None:
        raw = UsageRaw.objects.filter(
            hour__lt=now - timedelta(days=settings.MILLRACE_USAGE_RAW_DAYS),
            updated_at__lt=state.watermark - SLACK,
        ).delete()[0]
    hourly = UsageHour.objects.filter(
        hour__lt=now - timedelta(days=settings.MILLRACE_USAGE_KEEP_DAYS)
    ).delete()[0]
    return raw, hourly


def forget_tenant(tenant_id: int) -> int:
    """A deleted tenant's raw rows (its hourly rows go with its row)."""
    return UsageRaw.objects.filter(tenant_id=tenant_id).delete()[0]


# --- reading -------------------------------------------------------------------------------

GROUPS = ("topic", "principal", "hour", "tenant")


def period(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """[start, end) in whole hours; the last 24 hours by default."""
    end = end or timezone.now()
    start = start or end - timedelta(hours=24)
    floor = lambda t: t.replace(minute=0, second=0, microsecond=0)  # noqa: E731
    end_hour = floor(end) + (timedelta(hours=1) if end != floor(end) else timedelta(0))
    return floor(start), end_hour


def _derived(row: dict[str, Any]) -> dict[str, Any]:
    row = {**row, **{c: int(row.get(c) or 0) for c in COUNTERS}}
    row["storage_gb_hours"] = round(row["storage_byte_seconds"] / 3600 / GB, 6)
    row["partition_hours"] = round(row["partition_seconds"] / 3600, 4)
    return row


def usage(
    tenants: Iterable[Tenant] | None,
    start: datetime,
    end: datetime,
    group_by: str,
) -> list[dict[str, Any]]:
    """Hourly rows in [start, end) summed by ``group_by``: ``topic`` (produce and fetch,
    storage GB-hours, partition-hours), ``principal`` (chargeback: each service account's
    bytes, records and requests), ``hour`` (a time series) or ``tenant`` (operators)."""
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    if tenants is not None:
        rows = rows.filter(tenant__in=list(tenants))
    keys = {
        "topic": ["topic_id", "topic_name"],
        "principal": ["principal"],
        "hour": ["hour"],
        "tenant": ["tenant__slug"],
    }[group_by]
    if group_by == "topic":
        rows = rows.exclude(topic_id=NO_TOPIC)
    elif group_by == "principal":
        rows = rows.exclude(principal="")
    sums = {c: Sum(c) for c in COUNTERS}
    found = [_derived(r) for r in rows.values(*keys).annotate(**sums).order_by(*keys)]
    for r in found:
        if "topic_id" in r:
            r["topic"] = r.pop("topic_name")
            r["topic_id"] = str(r["topic_id"])
        if "tenant__slug" in r:
            r["tenant"] = r.pop("tenant__slug")
        if isinstance(r.get("hour"), datetime):
            r["hour"] = r["hour"].isoformat()
    return found


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summed = {c: sum(int(r[c]) for r in rows) for c in COUNTERS}
    return _derived(summed)


def detail(tenant: Tenant | None, start: datetime, end: datetime) -> Any:
    """Every hourly row of the period (the CSV export)."""
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end).select_related("tenant")
    if tenant is not None:
        rows = rows.filter(tenant=tenant)
    return rows.order_by("hour", "tenant__slug", "topic_name", "principal")


CSV_COLUMNS = ["hour", "tenant", "topic", "topic_id", "principal", *COUNTERS]


def to_csv(rows: Iterable[UsageHour]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.hour.isoformat(),
                r.tenant.slug,
                r.topic_name,
                "" if r.topic_id == NO_TOPIC else str(r.topic_id),
                r.principal,
                *[getattr(r, c) for c in COUNTERS],
            ]
        )
    return out.getvalue()
