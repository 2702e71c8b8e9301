"""Use cases for consumer groups: what the coordinator stores, and what tenants may change.

The broker's coordinator calls the ``store_*`` / ``load_*`` functions through its metadata
port (``control_plane.brokerlink.groups``); people and the REST API call ``delete_group``
and ``reset_offsets``, which refuse to touch a group that has members, as Kafka's tools do.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from control_plane.audit.services import record_event
from control_plane.catalog.models import Topic
from control_plane.core.actor import Actor
from control_plane.core.errors import Conflict, InvalidInput, NotFound
from control_plane.groups.models import CommittedOffset, ConsumerGroup, GroupType
from control_plane.tenancy.models import Tenant
from data_plane.groups.model import (
    ConsumerMemberRecord,
    GroupRecord,
    MemberRecord,
    OffsetRecord,
    TopicPartitions,
)
from data_plane.groups.model import GroupState as WireState
from data_plane.groups.model import GroupType as WireType


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- the coordinator's persistence ---------------------------------------------------------


def _parts(value: Any) -> TopicPartitions:
    return tuple((str(t), tuple(int(p) for p in ps)) for t, ps in value or [])


def _consumer_member(m: dict[str, Any]) -> ConsumerMemberRecord:
    return ConsumerMemberRecord(
        member_id=m["member_id"],
        instance_id=m.get("instance_id"),
        rack_id=m.get("rack_id"),
        client_id=m.get("client_id", ""),
        host=m.get("host", ""),
        rebalance_timeout_ms=int(m.get("rebalance_timeout_ms", 300_000)),
        subscribed_topic_names=tuple(m.get("subscribed_topic_names", ())),
        subscribed_topic_regex=m.get("subscribed_topic_regex"),
        server_assignor=m.get("server_assignor"),
        member_epoch=int(m.get("member_epoch", 0)),
        previous_member_epoch=int(m.get("previous_member_epoch", 0)),
        state=m.get("state", "stable"),
        assigned=_parts(m.get("assigned")),
        revoking=_parts(m.get("revoking")),
        target=_parts(m.get("target")),
        resolved=tuple((str(n), str(t), int(c)) for n, t, c in m.get("resolved", ())),
        classic_protocols=None
        if m.get("classic_protocols") is None
        else tuple((str(n), base64.b64decode(d)) for n, d in m["classic_protocols"]),
        classic_session_timeout_ms=int(m.get("classic_session_timeout_ms", 0)),
    )


def _consumer_member_json(m: ConsumerMemberRecord) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "client_id": m.client_id,
        "host": m.host,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "subscribed_topic_names": list(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "server_assignor": m.server_assignor,
        "member_epoch": m.member_epoch,
        "previous_member_epoch": m.previous_member_epoch,
        "state": m.state,
        "assigned": [[t, list(ps)] for t, ps in m.assigned],
        "revoking": [[t, list(ps)] for t, ps in m.revoking],
        "target": [[t, list(ps)] for t, ps in m.target],
        "resolved": [list(r) for r in m.resolved],
        "classic_protocols": None
        if m.classic_protocols is None
        else [[n, _b64(d)] for n, d in m.classic_protocols],
        "classic_session_timeout_ms": m.classic_session_timeout_ms,
    }


def group_record(group: ConsumerGroup) -> GroupRecord:
    if group.group_type == GroupType.CONSUMER:
        return GroupRecord(
            tenant_id=group.tenant_id,
            group_id=group.group_id,
            state=WireState(group.state),
            generation=group.generation,
            protocol_type="consumer",
            protocol_name=group.protocol or None,
            leader=None,
            members=(),
            state_since_ms=_ms(group.state_changed_at),
            group_type=WireType.CONSUMER,
            assignment_epoch=group.assignment_epoch,
            consumer_members=tuple(_consumer_member(m) for m in group.members),
        )
    return GroupRecord(
        tenant_id=group.tenant_id,
        group_id=group.group_id,
        state=WireState(group.state),
        generation=group.generation,
        protocol_type=group.protocol_type or None,
        protocol_name=group.protocol or None,
        leader=group.leader or None,
        members=tuple(
            MemberRecord(
                member_id=m["member_id"],
                instance_id=m.get("instance_id"),
                client_id=m.get("client_id", ""),
                host=m.get("host", ""),
                session_timeout_ms=int(m.get("session_timeout_ms", 10_000)),
                rebalance_timeout_ms=int(m.get("rebalance_timeout_ms", 10_000)),
                metadata=base64.b64decode(m.get("metadata", "")),
                assignment=base64.b64decode(m.get("assignment", "")),
            )
            for m in group.members
        ),
        state_since_ms=_ms(group.state_changed_at),
    )


def load_group(tenant_id: int, group_id: str) -> GroupRecord | None:
    group = ConsumerGroup.objects.filter(tenant_id=tenant_id, group_id=group_id).first()
    return None if group is None else group_record(group)


def store_group(record: GroupRecord) -> None:
    consumer = record.group_type == WireType.CONSUMER
    members = (
        [_consumer_member_json(m) for m in record.consumer_members]
        if consumer
        else [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "metadata": _b64(m.metadata),
                "assignment": _b64(m.assignment),
            }
            for m in record.members
        ]
    )
    ConsumerGroup.objects.update_or_create(
        tenant_id=record.tenant_id,
        group_id=record.group_id,
        defaults={
            "group_type": str(record.group_type),
            "state": str(record.state),
            "generation": record.generation,
            "assignment_epoch": record.assignment_epoch,
            "protocol_type": record.protocol_type or "",
            "protocol": record.protocol_name or "",
            "leader": record.leader or "",
            "members": members,
            "state_changed_at": _dt(record.state_since_ms),
        },
    )


def list_group_records(tenant_id: int) -> list[GroupRecord]:
    return [group_record(g) for g in ConsumerGroup.objects.filter(tenant_id=tenant_id)]


def _topics_by_name(tenant_id: int, names: set[str]) -> dict[str, Topic]:
    return {t.name: t for t in Topic.objects.filter(tenant_id=tenant_id, name__in=names)}


def _upsert_offsets(rows: list[CommittedOffset]) -> None:
    """Insert or overwrite one committed offset per (group, topic, partition)."""
    CommittedOffset.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["group", "topic", "partition"],
        update_fields=["offset", "leader_epoch", "metadata", "committed_at"],
    )


@transaction.atomic
def store_offsets(tenant_id: int, group_id: str, offsets: list[OffsetRecord]) -> None:
    """One OffsetCommit request: every offset in one transaction (the group row too)."""
    group, _ = ConsumerGroup.objects.get_or_create(tenant_id=tenant_id, group_id=group_id)
    topics = _topics_by_name(tenant_id, {o.topic for o in offsets})
    rows = [
        CommittedOffset(
            group=group,
            topic=topics[o.topic],
            partition=o.partition,
            offset=o.offset,
            leader_epoch=o.leader_epoch,
            metadata=o.metadata,
            committed_at=_dt(o.commit_ms) if o.commit_ms else datetime.now(tz=UTC),
        )
        for o in offsets
        if o.topic in topics  # a topic deleted meanwhile: nothing to keep
    ]
    _upsert_offsets(rows)


def load_offsets(tenant_id: int, group_id: str) -> list[OffsetRecord]:
    rows = CommittedOffset.objects.filter(
        group__tenant_id=tenant_id, group__group_id=group_id
    ).select_related("topic")
    return [
        OffsetRecord(
            r.topic.name, r.partition, r.offset, r.leader_epoch, r.metadata, _ms(r.committed_at)
        )
        for r in rows
    ]


@transaction.atomic
def remove_offsets(tenant_id: int, group_id: str, partitions: list[tuple[str, int]]) -> None:
    topics = _topics_by_name(tenant_id, {t for t, _ in partitions})
    for name, index in partitions:
        if name in topics:
            CommittedOffset.objects.filter(
                group__tenant_id=tenant_id,
                group__group_id=group_id,
                topic=topics[name],
                partition=index,
            ).delete()


# --- what people do ------------------------------------------------------------------------


def _locked_group(tenant: Tenant, group_id: str) -> ConsumerGroup:
    group = (
        ConsumerGroup.objects.select_for_update().filter(tenant=tenant, group_id=group_id).first()
    )
    if group is None:
        raise NotFound(f"consumer group {group_id!r} does not exist", field="group_id")
    return group


def ensure_inactive(group: ConsumerGroup, what: str) -> None:
    if group.is_active:
        raise Conflict(
            f"cannot {what} consumer group {group.group_id!r} while it has members "
            f"(state {group.state}, {len(group.members)} members); stop its consumers first",
            field="group_id",
        )


@transaction.atomic
def delete_group(actor: Actor, tenant: Tenant, group_id: str) -> None:
    """Delete an empty group with its committed offsets (Kafka's DeleteGroups)."""
    group = _locked_group(tenant, group_id)
    ensure_inactive(group, "delete")
    record_event(
        actor,
        tenant=tenant,
        action="group.delete",
        object_type="consumer_group",
        object_id=group.pk,
        object_repr=group_id,
        before={"group_id": group_id, "state": group.state, "generation": group.generation},
    )
    group.delete()


RESET_TO = ("earliest", "latest", "timestamp", "offset")


def reset_offsets(
    actor: Actor,
    tenant: Tenant,
    group_id: str,
    new_offsets: dict[tuple[str, int], int],
) -> list[dict[str, Any]]:
    """Set committed offsets of an inactive group; ``new_offsets`` are already resolved.

    The caller turns earliest / latest / timestamp into offsets (it needs the brokers);
    here they are written in one transaction, with the group locked so a consumer joining
    meanwhile either sees all of them or finds the group busy.
    """
    with transaction.atomic():
        group = _locked_group(tenant, group_id)
        ensure_inactive(group, "reset offsets of")
        topics = _topics_by_name(tenant.pk, {t for t, _ in new_offsets})
        for (name, partition), offset in new_offsets.items():
            topic = topics.get(name)
            if topic is None:
                raise InvalidInput(f"topic {name!r} does not exist", field="topic")
            if not 0 <= partition < topic.partition_count:
                raise InvalidInput(
                    f"topic {name!r} has no partition {partition}", field="partition"
                )
            if offset < 0:
                raise InvalidInput("offsets must not be negative", field="offset")
        before = {
            f"{o.topic.name}-{o.partition}": o.offset for o in group.offsets.select_related("topic")
        }
        now = datetime.now(tz=UTC)
        _upsert_offsets(
            [
                CommittedOffset(
                    group=group,
                    topic=topics[name],
                    partition=partition,
                    offset=offset,
                    leader_epoch=-1,
                    metadata="",
                    committed_at=now,
                )
                for (name, partition), offset in new_offsets.items()
            ]
        )
        after = {f"{n}-{p}": o for (n, p), o in new_offsets.items()}
        record_event(
            actor,
            tenant=tenant,
            action="group.reset_offsets",
            object_type="consumer_group",
            object_id=group.pk,
            object_repr=group_id,
            before=before,
            after=after,
        )
    return [{"topic": n, "partition": p, "offset": o} for (n, p), o in sorted(new_offsets.items())]
