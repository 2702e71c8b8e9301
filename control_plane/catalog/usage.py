"""What topics hold and how fast they move: live sizes, and the sampled throughput series.

Sizes come from the brokers (DescribeLogDirs, asked as the tenant's internal principal);
throughput comes from :class:`~control_plane.catalog.models.TopicSample` rows that
:func:`control_plane.groups.topic_samples.sample_topics` writes every
``MILLRACE_LAG_SAMPLE_SECONDS`` (the beat schedule), kept for ``MILLRACE_LAG_HISTORY_HOURS``
like the lag history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Sum
from django.utils import timezone

from control_plane.catalog.brokers import KafkaClientError, broker_client
from control_plane.catalog.models import Topic, TopicSample
from control_plane.core.errors import Unavailable
from control_plane.tenancy.models import Tenant
from data_plane.client import ClusterClient


def topic_sizes(
    tenant: Tenant, topics: Iterable[Topic], client: ClusterClient | None = None
) -> tuple[dict[str, int], str | None]:
    """({topic: bytes on its leaders}, why sizes are missing or None); on ``client`` if
    given (one connection for a whole page), else on a connection of its own."""
    names = sorted({t.name for t in topics})
    if not names:
        return {}, None
    try:
        if client is not None:
            sizes = client.log_dirs(names)
        else:
            with broker_client(tenant) as own:
                sizes = own.log_dirs(names)
    except Unavailable as exc:
        return {}, exc.message
    except KafkaClientError as exc:
        return {}, f"the brokers could not be asked: {exc}"
    out: dict[str, int] = dict.fromkeys(names, 0)
    for (name, _), size in sizes.items():
        out[name] = out.get(name, 0) + size
    return out, None


def partition_sizes(tenant: Tenant, topic: Topic) -> dict[int, int]:
    """{partition: bytes on its leader}; empty when the brokers cannot be asked."""
    try:
        with broker_client(tenant) as client:
            return {p: size for (_, p), size in client.log_dirs([topic.name]).items()}
    except (Unavailable, KafkaClientError):
        return {}


def sampled_sizes(tenant: Tenant) -> tuple[dict[str, int], datetime | None]:
    """({topic: bytes} from the tenant's last sampling pass, when it ran); empty and None
    before the first pass. At most a sampling interval old (a minute), and cheap: the
    overview shows these instead of asking every broker on each view."""
    last = TopicSample.objects.filter(topic__tenant=tenant).aggregate(at=Max("at"))["at"]
    if last is None:
        return {}, None
    rows = TopicSample.objects.filter(topic__tenant=tenant, at=last, size_bytes__isnull=False)
    return dict(rows.values_list("topic__name", "size_bytes")), last


def throughput(tenant: Tenant, hours: int, topic: Topic | None = None) -> dict[str, Any]:
    """Chart data: records/s produced and consumed between consecutive samples."""
    since = timezone.now() - timedelta(hours=hours)
    samples = TopicSample.objects.filter(topic__tenant=tenant, at__gte=since)
    if topic is not None:
        samples = samples.filter(topic=topic)
    # Each sample carries its topic's rates since the one before: sum them per sampling time.
    produced: dict[float, float] = {}
    consumed: dict[float, float] = {}
    totals = (
        samples.filter(produced_per_s__isnull=False)
        .values("at")
        .annotate(produced=Sum("produced_per_s"), consumed=Sum("consumed_per_s"))
        .order_by("at")
    )
    for row in totals:
        at = row["at"].timestamp()
        produced[at] = row["produced"] or 0.0
        consumed[at] = row["consumed"] or 0.0
    x = sorted(produced)
    return {
        "x": x,
        "series": [
            {
                "label": "Produced (records/s)",
                "values": [round(produced[t], 2) for t in x],
                "scale": "records/s",
            },
            {
                "label": "Consumed (records/s)",
                "values": [round(consumed[t], 2) for t in x],
                "scale": "records/s",
            },
        ],
    }


def recent_rates(
    tenant: Tenant, minutes: int = 10, topics: Iterable[Topic] | None = None
) -> dict[str, float]:
    """{topic: records/s produced between its last two samples in the last ``minutes``},
    for ``topics`` (default: all the tenant's)."""
    since = timezone.now() - timedelta(minutes=minutes)
    latest: dict[str, list[TopicSample]] = defaultdict(list)
    samples = TopicSample.objects.filter(topic__tenant=tenant, at__gte=since).select_related(
        "topic"
    )
    if topics is not None:
        samples = samples.filter(topic__in=[t.pk for t in topics])
    for s in samples.order_by("topic_id", "-at"):
        pair = latest[s.topic.name]
        if len(pair) < 2:
            pair.append(s)
    rates = {}
    for name, (newer, *older) in latest.items():
        if older and (seconds := (newer.at - older[0].at).total_seconds()) > 0:
            rates[name] = round(max(0, newer.end_offset - older[0].end_offset) / seconds, 2)
    return rates
