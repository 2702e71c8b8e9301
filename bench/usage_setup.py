"""The usage benchmark's work inside Django (``python -m bench.usage_setup``), run by
:mod:`bench.usage` in a child process against its fresh database: seed tenants and one
hour of raw usage rows (COPY), then time the aggregation twice (the second sums the same
hour again, idempotent: every raw row is within the slack of the first run's watermark).
Answers one JSON line."""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench.store import answer, setup_django

HOUR = 3600


def run(tenants: int, topics: int, brokers: int) -> dict[str, Any]:
    from django.db import connection
    from django.db.models import Sum

    from control_plane.tenancy.models import Tenant
    from control_plane.usage import services as usage
    from control_plane.usage.models import UsageHour, UsageRaw
    from data_plane.broker.usage import NO_TOPIC

    started = time.monotonic()
    Tenant.objects.bulk_create(
        [Tenant(slug=f"u{i:05d}", name=f"u{i:05d}") for i in range(tenants)], batch_size=1000
    )
    ids = list(Tenant.objects.filter(slug__startswith="u").values_list("id", flat=True))
    hour = datetime.fromtimestamp(int(time.time()) // HOUR * HOUR - HOUR, tz=UTC)
    now = datetime.now(tz=UTC)
    columns = usage.RAW_COLUMNS
    raw = 0
    with connection.cursor() as cursor:
        copy_sql = f"COPY {UsageRaw._meta.db_table} ({', '.join(columns)}) FROM STDIN"
        with cursor.cursor.copy(copy_sql) as copy:
            for broker in range(1, brokers + 1):
                incarnation = uuid.uuid4().hex
                for tenant_id in ids:
                    for principal in ("User:producer", "User:consumer"):
                        key = (broker, incarnation, hour, tenant_id, NO_TOPIC, "", principal)
                        copy.write_row((*key, 60, 0, 0, 0, 0, 3600, 0, 0, now))
                        raw += 1
                    for t in range(topics):
                        topic = uuid.UUID(int=tenant_id * 1_000_000 + t + 1)
                        name = f"topic-{t}"
                        key = (broker, incarnation, hour, tenant_id, topic, name)
                        copy.write_row(
                            (*key, "User:producer", 60, 10**6, 10**4, 0, 0, 0, 0, 0, now)
                        )
                        copy.write_row(
                            (*key, "User:consumer", 60, 0, 0, 2 * 10**6, 0, 0, 0, 0, now)
                        )
                        copy.write_row((*key, "", 60, 0, 0, 0, 0, 0, 10**9 * HOUR, HOUR, now))
                        raw += 3
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {UsageRaw._meta.db_table}")  # as autovacuum would
    seeded = time.monotonic() - started
    first = usage.aggregate()
    rows = UsageHour.objects.count()
    again = usage.aggregate()
    sums = UsageHour.objects.aggregate(Sum("produce_bytes"))
    return {
        "tenants": tenants,
        "topics_per_tenant": topics,
        "brokers": brokers,
        "raw_rows": raw,
        "hourly_rows": rows,
        "seed_seconds": round(seeded, 1),
        "aggregation_seconds": round(first.seconds, 2),
        "again_seconds": round(again.seconds, 2),
        "again_same_rows": UsageHour.objects.count() == rows,
        "produce_bytes_total": int(sums["produce_bytes__sum"] or 0),
        "produce_bytes_expected": tenants * topics * brokers * 1_000_000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, required=True)
    parser.add_argument("--topics", type=int, required=True)
    parser.add_argument("--brokers", type=int, required=True)
    args = parser.parse_args()
    setup_django()
    answer(run(args.tenants, args.topics, args.brokers))


if __name__ == "__main__":
    main()
