"""Periodic consumer-group maintenance, and the topic samples (their consumed side is the
groups' committed offsets)."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from control_plane.groups import lag, topic_samples
from control_plane.groups.models import CommittedOffset, ConsumerGroup, GroupState


@shared_task(name="millrace.groups.expire_offsets", time_limit=300, ignore_result=True)
def expire_offsets() -> int:
    """Expire committed offsets as Kafka does (``offsets.retention.minutes``).

    A group that has had members loses all its offsets once it has been empty for the
    retention period. A group that never had members (offsets committed with assign(), by
    tools, or by a reset) keeps each offset for the retention period after its own commit.
    An empty group left without offsets is removed. Returns the number of offsets removed.
    """
    cutoff = timezone.now() - timedelta(minutes=settings.MILLRACE_OFFSETS_RETENTION_MINUTES)
    removed = 0
    empty = ConsumerGroup.objects.filter(state__in=[GroupState.EMPTY, GroupState.DEAD])
    for group in empty.iterator():
        if group.members:
            continue
        with transaction.atomic():
            locked = ConsumerGroup.objects.select_for_update().filter(pk=group.pk).first()
            if locked is None or locked.is_active:
                continue  # a member joined meanwhile
            offsets = CommittedOffset.objects.filter(group=locked)
            if locked.protocol_type:
                if locked.state_changed_at < cutoff:
                    removed += offsets.delete()[0]
            else:
                removed += offsets.filter(committed_at__lt=cutoff).delete()[0]
            if locked.state_changed_at < cutoff and not offsets.exists():
                locked.delete()
    return removed


@shared_task(name="millrace.groups.sample_lag", time_limit=120, ignore_result=True)
def sample_lag() -> int:
    """Record each group's lag per partition (the console's lag history); prune old samples."""
    return lag.sample_lag()


# Named for the catalog's TopicSample rows it writes (the name the beat schedule and the docs
# use); it runs here because it reads the groups' committed offsets.
@shared_task(name="millrace.catalog.sample_topics", time_limit=120, ignore_result=True)
def sample_topics() -> int:
    """Record each topic's end offset, consumed offset and size; prune old samples."""
    return topic_samples.sample_topics()
