"""Topic samples: every topic's end offset, consumed offset and size, once a sampling pass.

The rows are the catalog's (:class:`~control_plane.catalog.models.TopicSample`, read back by
:mod:`control_plane.catalog.usage` for the throughput charts), but "consumed" is the sum of
the groups' committed offsets, so the pass that writes them lives here, above the catalog.
The beat schedule runs it every ``MILLRACE_LAG_SAMPLE_SECONDS``
(``millrace.catalog.sample_topics``).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.db.models import Max, Sum
from django.utils import timezone

from control_plane.catalog.brokers import KafkaClientError, broker_client
from control_plane.catalog.models import Topic, TopicSample
from control_plane.core.errors import Unavailable
from control_plane.groups.models import CommittedOffset
from control_plane.tenancy.models import Tenant
from data_plane.client import LATEST


def sample_topics() -> int:
    """Record every topic's end offset, consumed offset and size; prune old samples."""
    now = timezone.now()
    written = 0
    for tenant in Tenant.objects.filter(topics__isnull=False).distinct():
        topics = list(Topic.objects.filter(tenant=tenant))
        consumed = dict(
            CommittedOffset.objects.filter(topic__tenant=tenant)
            .values_list("topic_id")
            .annotate(total=Sum("offset"))
        )
        try:
            with broker_client(tenant) as client:
                tps = {(t.name, p): t for t in topics for p in range(t.partition_count)}
                answers = client.list_offsets(dict.fromkeys(tps, LATEST))
                sizes = client.log_dirs([t.name for t in topics])
        except (Unavailable, KafkaClientError):
            continue  # this tenant's brokers are unreachable: no sample this time
        ends: dict[int, int] = defaultdict(int)
        complete: dict[int, bool] = defaultdict(lambda: True)
        for tp, answer in answers.items():
            if answer.error:
                complete[tps[tp].pk] = False
            else:
                ends[tps[tp].pk] += answer.offset
        bytes_by_topic: dict[str, int] = defaultdict(int)
        for (name, _), size in sizes.items():
            bytes_by_topic[name] += size
        previous = _previous_samples(tenant)
        rows = []
        for t in topics:
            if not complete[t.pk]:
                continue
            row = TopicSample(
                topic=t,
                at=now,
                end_offset=ends[t.pk],
                consumed=consumed.get(t.pk) or 0,
                size_bytes=bytes_by_topic.get(t.name),
            )
            before = previous.get(t.pk)
            seconds = (now - before.at).total_seconds() if before is not None else 0
            if before is not None and seconds > 0:
                # Counters only grow; a drop (an offset reset) counts as nothing moved.
                row.produced_per_s = max(0, row.end_offset - before.end_offset) / seconds
                row.consumed_per_s = max(0, row.consumed - before.consumed) / seconds
            rows.append(row)
        TopicSample.objects.bulk_create(rows)
        written += len(rows)
    horizon = now - timedelta(hours=settings.MILLRACE_LAG_HISTORY_HOURS)
    TopicSample.objects.filter(at__lt=horizon).delete()
    return written


def _previous_samples(tenant: Tenant) -> dict[int, TopicSample]:
    """{topic id: its sample from the tenant's last sampling pass} (one pass shares one
    time)."""
    last = TopicSample.objects.filter(topic__tenant=tenant).aggregate(at=Max("at"))["at"]
    if last is None:
        return {}
    return {s.topic_id: s for s in TopicSample.objects.filter(topic__tenant=tenant, at=last)}
