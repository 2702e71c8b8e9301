"""Use cases for topics: create, alter configs, add partitions, delete.

Each runs in one transaction that locks the tenant row, so concurrent creates cannot
overshoot the tenant's partition limit; everything is validated before the first write,
and brokers hear of the change only after commit (``notify_metadata_changed``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum

from control_plane.audit.services import record_event
from control_plane.catalog.models import Broker, Partition, Topic
from control_plane.core.actor import Actor
from control_plane.core.errors import AlreadyExists, InvalidInput, LimitExceeded
from control_plane.core.notify import notify_metadata_changed
from control_plane.tenancy.models import Tenant
from data_plane.placement import BrokerSlot, PlacementError, assign_replicas, rack_alternating
from data_plane.topic_config import (
    TOPIC_CONFIGS,
    InvalidConfig,
    InvalidTopicName,
    topic_collision_key,
    validate_topic_configs,
    validate_topic_name,
)

MAX_PARTITIONS_PER_TOPIC = 10_000


def topic_snapshot(topic: Topic) -> dict[str, Any]:
    return {
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "partition_count": topic.partition_count,
        "replication_factor": topic.replication_factor,
        "configs": dict(topic.configs),
    }


def _max_replication_factor() -> int:
    """Live brokers bound the replication factor once any broker has registered."""
    if Broker.objects.exists():
        return Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).count()
    return settings.MILLRACE_MAX_REPLICATION_FACTOR


def default_replication_factor() -> int:
    if Broker.objects.exists():
        live = Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).count()
        return max(1, min(settings.MILLRACE_DEFAULT_REPLICATION_FACTOR, live))
    return 1


def _tenant_partitions_in_use(tenant: Tenant) -> int:
    total = Topic.objects.filter(tenant=tenant).aggregate(total=Sum("partition_count"))["total"]
    return int(total or 0)


def _check_partition_budget(tenant: Tenant, extra: int) -> None:
    in_use = _tenant_partitions_in_use(tenant)
    if in_use + extra > tenant.max_partitions:
        raise LimitExceeded(
            f"tenant {tenant.slug} may have {tenant.max_partitions} partitions; "
            f"{in_use} are in use and this needs {extra} more",
            field="partition_count",
        )


def _check_partition_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidInput("partition_count must be an integer", field="partition_count")
    if not 1 <= count <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidInput(
            f"partition_count must be between 1 and {MAX_PARTITIONS_PER_TOPIC}",
            field="partition_count",
        )
    return count


def _validated_configs(configs: Mapping[str, object], replication_factor: int) -> dict[str, Any]:
    try:
        return validate_topic_configs(configs, replication_factor=replication_factor)
    except InvalidConfig as exc:
        raise InvalidInput(exc.message, field=f"configs.{exc.key}") from None


def _check_retention(tenant: Tenant, configs: Mapping[str, object]) -> None:
    """A retention.ms set on a topic stays within the tenant's plan's ceiling (topics
    without one get the default, which brokers cap at the ceiling)."""
    ceiling = tenant.max_retention_ms
    value = configs.get("retention.ms")
    if ceiling is None or value is None:
        return
    retention = int(str(value))
    if retention < 0 or retention > ceiling:
        asked = "unlimited retention (-1)" if retention < 0 else str(retention)
        raise InvalidInput(
            f"retention.ms may be at most {ceiling} in this tenant (its plan's ceiling), "
            f"not {asked}",
            field="configs.retention.ms",
        )


def _live_slots() -> list[BrokerSlot]:
    live = Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).filter(decommissioning=False)
    return [BrokerSlot(b.id, b.rack or None) for b in live.order_by("id")]


def _placement_start(topic: Topic, slots: list[BrokerSlot]) -> int:
    """Where partition 0's replicas began (so added partitions continue the pattern);
    a random broker for a new topic, as Kafka does."""
    first = Partition.objects.filter(topic=topic, index=0).values_list("replicas", flat=True)
    ordered = [b.id for b in rack_alternating(slots)]
    replicas = first.first() or []
    if replicas and replicas[0] in ordered:
        return ordered.index(replicas[0])
    return secrets.randbelow(len(slots))


def place_replicas(topic: Topic, start: int, stop: int, slots: list[BrokerSlot]) -> list[list[int]]:
    """Replica lists for partitions ``start``..``stop`` over the live brokers ``slots``."""
    try:
        return assign_replicas(
            slots,
            stop - start,
            topic.replication_factor,
            first_partition=start,
            start=_placement_start(topic, slots),
        )
    except PlacementError as exc:
        raise InvalidInput(str(exc), field="replication_factor") from None


def validated_assignment(
    assignment: Sequence[Sequence[int]], replication_factor: int | None
) -> list[list[int]]:
    """An operator's replica lists, one per new partition, checked as Kafka checks them:
    each non-empty, no broker twice, all the same length (the topic's replication factor,
    if it has one), and every broker live and not being decommissioned."""
    field = "replica_assignment"
    if not assignment:
        raise InvalidInput("the replica assignment names no partitions", field=field)
    live = {slot.id for slot in _live_slots()}
    plan: list[list[int]] = []
    for index, replicas in enumerate(assignment):
        replicas = list(replicas)
        if not replicas:
            raise InvalidInput(f"partition {index} has no replicas", field=field)
        if len(set(replicas)) != len(replicas):
            raise InvalidInput(f"partition {index} names a broker twice: {replicas}", field=field)
        expected = replication_factor or (len(plan[0]) if plan else len(replicas))
        if len(replicas) != expected:
            raise InvalidInput(
                f"partition {index} has {len(replicas)} replicas; every partition needs "
                f"{expected} (the replication factor)",
                field=field,
            )
        gone = [b for b in replicas if b not in live]
        if gone:
            raise InvalidInput(
                f"partition {index}: broker(s) {gone} are not live or are being decommissioned",
                field=field,
            )
        plan.append(replicas)
    return plan


def _create_partitions(
    topic: Topic, start: int, stop: int, plan: list[list[int]] | None = None
) -> None:
    """New partitions, with replicas on the live brokers (all in the ISR, the first leads),
    placed by Millrace unless an operator gave the ``plan``.

    Before any broker has registered they stay unassigned; the first brokers to come up
    place them (``assign_unassigned_partitions``).
    """
    slots = _live_slots()
    if not slots and plan is None:
        Partition.objects.bulk_create(Partition(topic=topic, index=i) for i in range(start, stop))
        return
    if plan is None:
        plan = place_replicas(topic, start, stop, slots)
    Partition.objects.bulk_create(
        Partition(topic=topic, index=i, replicas=r, leader=r[0], isr=r)
        for i, r in zip(range(start, stop), plan, strict=True)
    )


def assign_unassigned_partitions() -> int:
    """Place partitions created before enough brokers were up; returns how many.

    A topic whose replication factor the live brokers cannot meet yet stays unassigned
    (its partitions are offline) until they can.
    """
    slots = _live_slots()
    done = 0
    if not slots:
        return 0
    topic_ids = Partition.objects.filter(replicas=[]).values_list("topic_id", flat=True)
    for topic in Topic.objects.filter(pk__in=set(topic_ids)).select_for_update():
        if topic.replication_factor > len(slots):
            continue
        rows = list(Partition.objects.filter(topic=topic, replicas=[]).order_by("index"))
        for row in rows:
            (replicas,) = place_replicas(topic, row.index, row.index + 1, slots)
            Partition.objects.filter(pk=row.pk, replicas=[]).update(
                replicas=replicas, leader=replicas[0], isr=replicas
            )
            done += 1
        notify_metadata_changed(
            "topic.partitions_assigned", tenant=topic.tenant_id, topic_id=str(topic.topic_id)
        )
    return done


def _topic_changed(
    actor: Actor,
    topic: Topic,
    action: str,
    kind: str,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    """Audit the change and tell brokers about it once the transaction commits."""
    record_event(
        actor,
        tenant=topic.tenant,
        action=action,
        object_type="topic",
        object_id=topic.topic_id,
        object_repr=topic.name,
        before=before,
        after=after,
    )
    notify_metadata_changed(kind, tenant=topic.tenant_id, topic_id=str(topic.topic_id))


@transaction.atomic
def create_topic(
    actor: Actor,
    tenant: Tenant,
    *,
    name: str,
    partition_count: int,
    replication_factor: int | None = None,
    configs: Mapping[str, object] | None = None,
    replica_assignment: Sequence[Sequence[int]] | None = None,
) -> Topic:
    """A new topic; ``replica_assignment`` (an operator's placement, one replica list per
    partition) sets the partition count and replication factor instead."""
    try:
        validate_topic_name(name)
    except InvalidTopicName as exc:
        raise InvalidInput(str(exc), field="name") from None
    plan = None
    if replica_assignment is not None:
        plan = validated_assignment(replica_assignment, None)
        partition_count, replication_factor = len(plan), len(plan[0])
    _check_partition_count(partition_count)
    if replication_factor is None:
        replication_factor = default_replication_factor()
    if isinstance(replication_factor, bool) or not isinstance(replication_factor, int):
        raise InvalidInput("replication_factor must be an integer", field="replication_factor")
    max_rf = _max_replication_factor()
    if max_rf == 0:
        raise InvalidInput(
            "no broker is alive to host replicas; try again when brokers are up",
            field="replication_factor",
        )
    if not 1 <= replication_factor <= max_rf:
        raise InvalidInput(
            f"replication_factor must be between 1 and {max_rf} (live brokers)"
            if Broker.objects.exists()
            else f"replication_factor must be between 1 and {max_rf}",
            field="replication_factor",
        )
    parsed = _validated_configs(configs or {}, replication_factor)

    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    _check_retention(tenant, parsed)
    if Topic.objects.filter(tenant=tenant, name=name).exists():
        raise AlreadyExists(f"topic {name!r} already exists", field="name")
    collision = (
        Topic.objects.filter(tenant=tenant, collision_key=topic_collision_key(name))
        .values_list("name", flat=True)
        .first()
    )
    if collision:
        raise AlreadyExists(
            f"topic {name!r} collides with existing topic {collision!r} "
            "('.' and '_' are interchangeable in metric names)",
            field="name",
        )
    _check_partition_budget(tenant, partition_count)
    try:
        with transaction.atomic():
            topic = Topic.objects.create(
                tenant=tenant,
                name=name,
                collision_key=topic_collision_key(name),
                partition_count=partition_count,
                replication_factor=replication_factor,
                configs=parsed,
            )
    except IntegrityError:
        raise AlreadyExists(f"topic {name!r} already exists", field="name") from None
    _create_partitions(topic, 0, partition_count, plan)
    _topic_changed(actor, topic, "topic.create", "topic.created", after=topic_snapshot(topic))
    return topic


@transaction.atomic
def alter_topic_configs(actor: Actor, topic: Topic, changes: Mapping[str, object | None]) -> Topic:
    """Incremental alter: a value sets the override, ``None`` resets it to the default."""
    topic = Topic.objects.select_for_update().get(pk=topic.pk)
    before = topic_snapshot(topic)
    merged: dict[str, object] = dict(topic.configs)
    for key, value in changes.items():
        if key not in TOPIC_CONFIGS:
            raise InvalidInput(f"unknown topic config {key!r}", field=f"configs.{key}")
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    parsed = _validated_configs(merged, topic.replication_factor)
    if changes.get("retention.ms") is not None:
        _check_retention(topic.tenant, parsed)
    topic.configs = parsed
    topic.save(update_fields=["configs", "updated_at"])
    _topic_changed(
        actor,
        topic,
        "topic.alter_configs",
        "topic.configs_changed",
        before=before,
        after=topic_snapshot(topic),
    )
    return topic


@transaction.atomic
def add_partitions(
    actor: Actor,
    topic: Topic,
    *,
    partition_count: int,
    replica_assignment: Sequence[Sequence[int]] | None = None,
) -> Topic:
    """Grow the topic to ``partition_count`` partitions (Kafka's CreatePartitions);
    ``replica_assignment`` is an operator's placement of the new partitions."""
    _check_partition_count(partition_count)
    Tenant.objects.select_for_update().get(pk=topic.tenant_id)
    topic = Topic.objects.select_for_update().get(pk=topic.pk)
    if partition_count < topic.partition_count:
        raise InvalidInput(
            f"topic {topic.name!r} has {topic.partition_count} partitions; the count can "
            f"only grow (asked for {partition_count})",
            field="partition_count",
        )
    if partition_count == topic.partition_count:
        raise InvalidInput(
            f"topic {topic.name!r} already has {partition_count} partitions",
            field="partition_count",
        )
    _check_partition_budget(topic.tenant, partition_count - topic.partition_count)
    plan = None
    if replica_assignment is not None:
        plan = validated_assignment(replica_assignment, topic.replication_factor)
        added = partition_count - topic.partition_count
        if len(plan) != added:
            raise InvalidInput(
                f"the replica assignment places {len(plan)} partition(s) but {added} are "
                "being added",
                field="replica_assignment",
            )
    before = topic_snapshot(topic)
    old_count = topic.partition_count
    topic.partition_count = partition_count
    topic.save(update_fields=["partition_count", "updated_at"])
    _create_partitions(topic, old_count, partition_count, plan)
    _topic_changed(
        actor,
        topic,
        "topic.add_partitions",
        "topic.partitions_added",
        before=before,
        after=topic_snapshot(topic),
    )
    return topic


@transaction.atomic
def delete_topic(actor: Actor, topic: Topic) -> None:
    """Remove the topic from metadata; brokers delete its logs when they see it gone."""
    topic = Topic.objects.select_for_update().get(pk=topic.pk)
    before = topic_snapshot(topic)
    _topic_changed(actor, topic, "topic.delete", "topic.deleted", before=before)
    topic.delete()
