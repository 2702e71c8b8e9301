"""The controller's decisions on partition leadership, made by compare-and-set on rows.

Every change to a partition's leadership or ISR is one ``UPDATE ... WHERE
partition_epoch = <the epoch it was decided from>``. The update bumps the partition epoch,
and the leader epoch too when the leader changes. If two controllers decide at once, the
database lets exactly one update through. The other finds its row changed, re-reads it,
and re-decides from the new state, which usually means there is nothing left to do.
Brokers hear of every change through ``notify_metadata_changed`` after commit.

The rules are Kafka's (KRaft):

* A broker whose heartbeat lease expired is **fenced**. It leaves the ISR of every
  partition, unless it is the last member: the ISR never becomes empty, so the last
  in-sync replica can lead again when it returns.
* A partition whose leader is not live gets the first live replica (in replica order)
  that is in the ISR. If there is none, it stays offline (leader None). Only a topic with
  ``unclean.leader.election.enable`` then takes a live out-of-sync replica; that is
  audited, because records may be lost.
* **Preferred leader election** moves leadership back to the first replica once it is
  live and in the ISR.
* **AlterPartition**: a leader proposes a new ISR. It is applied only if the leader and
  both epochs match the row, and the ISR holds the leader and only replicas.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import pairwise

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet

from control_plane.audit.services import record_event
from control_plane.catalog.models import Broker, BrokerState, Partition
from control_plane.core.actor import Actor
from control_plane.core.liveness import lock_holders
from control_plane.core.notify import notify_metadata_changed
from data_plane.metadata.election import requested_election
from data_plane.protocol.errors import ErrorCode
from data_plane.topic_config import TOPIC_CONFIGS

logger = logging.getLogger("millrace.controller")
SYSTEM = Actor.system()


@dataclass(frozen=True)
class Change:
    topic_id: str
    partition: int
    leader: int | None
    leader_epoch: int
    isr: tuple[int, ...]
    reason: str


def live_broker_ids() -> set[int]:
    return set(
        Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).values_list("id", flat=True)
    )


def _unclean_allowed(partition: Partition) -> bool:
    value = partition.topic.configs.get(
        "unclean.leader.election.enable",
        TOPIC_CONFIGS["unclean.leader.election.enable"].default,
    )
    return value is True or str(value).lower() == "true"


def _cas(
    partition: Partition,
    *,
    leader: int | None,
    isr: list[int],
    reason: str,
    **assignment: list[int],
) -> Change | None:
    """Apply (leader, isr) if the row is still at the epoch it was read at.

    ``assignment`` may also set ``replicas``, ``adding_replicas`` and ``removing_replicas``
    (reassignments); they move with the same compare-and-set.
    """
    new_leader = leader != partition.leader
    updated = Partition.objects.filter(
        pk=partition.pk, partition_epoch=partition.partition_epoch
    ).update(
        leader=leader,
        isr=isr,
        partition_epoch=F("partition_epoch") + 1,
        leader_epoch=F("leader_epoch") + (1 if new_leader else 0),
        **assignment,
    )
    if not updated:
        return None
    topic_id = str(partition.topic.topic_id)
    notify_metadata_changed(
        "partition.changed",
        tenant=partition.topic.tenant_id,
        topic_id=topic_id,
        partition=partition.index,
    )
    epoch = partition.leader_epoch + (1 if new_leader else 0)
    logger.info(
        "partition %s-%s: leader %s -> %s (epoch %s), isr %s (%s)",
        topic_id,
        partition.index,
        partition.leader,
        leader,
        epoch,
        isr,
        reason,
    )
    return Change(topic_id, partition.index, leader, epoch, tuple(isr), reason)


def _decide(partition: Partition, live: set[int]) -> tuple[int | None, list[int], str] | None:
    """The (leader, isr, reason) this partition should move to, or None if it is fine."""
    replicas: list[int] = list(partition.replicas)
    if not replicas:
        return None  # unassigned: placement's job, not an election
    isr = [b for b in partition.isr if b in replicas]
    live_isr = [b for b in isr if b in live]
    # The ISR loses dead members, but never its last one.
    new_isr = live_isr or isr[:1] or []
    leader = partition.leader
    if leader is not None and leader in live and leader in new_isr:
        if new_isr != list(partition.isr):
            return leader, new_isr, "dead brokers leave the ISR"
        return None
    candidates = [b for b in replicas if b in live_isr]
    if candidates:
        return candidates[0], live_isr, "leader lost; elected from the ISR"
    live_replicas = [b for b in replicas if b in live]
    if live_replicas and _unclean_allowed(partition):
        return live_replicas[0], [live_replicas[0]], "unclean election"
    if leader is None and new_isr == list(partition.isr):
        return None  # already offline, nothing new
    return None, new_isr, "no live in-sync replica: offline"


def _not_in(field: str, ids: set[int]) -> Q:
    """``field`` is not one of ``ids``, as ranges an index can answer (the gaps around
    the ids), where ``NOT IN`` would be a scan of the table."""
    if not ids:
        return Q(**{f"{field}__isnull": False})
    ordered = sorted(ids)
    outside = Q(**{f"{field}__lt": ordered[0]}) | Q(**{f"{field}__gt": ordered[-1]})
    for low, high in pairwise(ordered):
        if high - low > 1:
            outside |= Q(**{f"{field}__gt": low, f"{field}__lt": high})
    return outside


def _may_need_election(live: set[int]) -> QuerySet[Partition]:
    """The assigned partitions an election could change: no leader, a leader that is not
    live, or (when some registered broker is not live) an ISR naming a broker that is not.
    A tick then costs what the failures cost, not what the cluster holds: each condition
    is an index lookup (migration catalog 0009). Where JSON containment is not available
    (SQLite, the embedded default) every partition is checked once some broker is down."""
    rows = Partition.objects.exclude(replicas=[]).select_related("topic__tenant")
    down = set(Broker.objects.values_list("id", flat=True)) - live
    wanted = Q(leader__isnull=True) | _not_in("leader", live)
    if down:
        if not connection.features.supports_json_field_contains:
            return rows
        for broker_id in sorted(down):
            wanted |= Q(isr__contains=[broker_id])
    return rows.filter(wanted)


def elect_leaders(partitions: list[Partition] | None = None, *, attempts: int = 5) -> list[Change]:
    """Re-decide leadership for ``partitions`` (default: every assigned partition that
    may need it, :func:`_may_need_election`)."""
    live = live_broker_ids()
    rows = partitions
    if rows is None:
        rows = list(_may_need_election(live))
    changes: list[Change] = []
    for row in rows:
        current: Partition | None = row
        for _ in range(attempts):
            if current is None:
                break
            decision = _decide(current, live)
            if decision is None:
                break
            leader, isr, reason = decision
            with transaction.atomic():
                change = _cas(current, leader=leader, isr=isr, reason=reason)
                if change is not None and reason == "unclean election":
                    _audit_unclean(current, leader)
            if change is not None:
                changes.append(change)
                break
            # Another controller changed the row first: decide again from what it did.
            current = (
                Partition.objects.select_related("topic__tenant").filter(pk=current.pk).first()
            )
    return changes


def _audit_unclean(partition: Partition, leader: int | None, actor: Actor = SYSTEM) -> None:
    record_event(
        actor,
        tenant=partition.topic.tenant,
        action="partition.unclean_election",
        object_type="partition",
        object_id=f"{partition.topic.topic_id}-{partition.index}",
        object_repr=f"{partition.topic.name}-{partition.index}",
        before={"leader": partition.leader, "isr": list(partition.isr)},
        after={"leader": leader, "isr": [leader]},
    )


_stalled = False


def _note_stalled(stalled: bool) -> None:
    """Log once when every running broker's lease has lapsed (and once when it ends)."""
    global _stalled
    if stalled and not _stalled:
        logger.warning(
            "no running broker renewed its lease in time; keeping them all (the store or "
            "the machine is slow, or the only broker is paused): nothing is fenced"
        )
    elif _stalled and not stalled:
        logger.info("broker leases are being renewed again")
    _stalled = stalled


def fence_expired_brokers() -> list[int]:
    """Mark brokers as fenced whose lease expired or whose process is gone (its liveness
    lock was released, see ``core/liveness.py``); returns their ids."""
    lease = settings.MILLRACE_BROKER_LEASE_SECONDS
    cutoff = Broker.objects.lease_cutoff(lease)
    running = Broker.objects.filter(state=BrokerState.RUNNING)
    stale = set(running.filter(last_heartbeat__lt=cutoff).values_list("id", flat=True))
    # Only brokers the cluster no longer counts as live: when every lease lapsed at once,
    # all are still (``BrokerQuerySet.live``), and fencing them would leave no leader.
    live = set(Broker.objects.live(lease).values_list("id", flat=True))
    expired = sorted(stale - live)
    _note_stalled(bool(stale & live))
    if expired:
        Broker.objects.filter(id__in=expired, last_heartbeat__lt=cutoff).update(
            state=BrokerState.FENCED
        )
        logger.warning("fenced brokers %s (lease expired)", expired)
    # Rows first, then the locks: a broker takes its lock before its row says it holds it.
    claimed = set(running.filter(liveness_lock=True).values_list("id", flat=True))
    holders = lock_holders() if claimed else None
    gone = sorted(claimed - holders) if holders is not None else []
    if gone:
        Broker.objects.filter(id__in=gone, liveness_lock=True).update(state=BrokerState.FENCED)
        logger.warning("fenced brokers %s (process gone: liveness lock released)", gone)
    fenced = sorted(set(expired) | set(gone))
    if fenced:
        notify_metadata_changed("broker.fenced", brokers=fenced)
    return fenced


def controlled_shutdown(broker_id: int) -> int:
    """Kafka's controlled shutdown, asked for by a broker about to stop.

    The broker stops counting as live (state SHUTTING_DOWN; it stopped heartbeating
    first, so nothing marks it running again). Every partition it leads or is in the ISR
    of, and that has another live in-sync replica, is then re-decided by the usual rules:
    leadership goes to the first live replica in the ISR, and the broker leaves the ISR,
    so acks=all writes stop waiting for it. Partitions whose only in-sync replica it is
    keep it as leader until it is gone (moving them would make them offline early).
    Returns how many partitions it still leads.
    """
    Broker.objects.filter(id=broker_id).update(state=BrokerState.SHUTTING_DOWN)
    notify_metadata_changed("broker.shutting_down", brokers=[broker_id])
    live = live_broker_ids() - {broker_id}
    rows = [
        row
        for row in Partition.objects.exclude(replicas=[]).select_related("topic__tenant")
        if (row.leader == broker_id or broker_id in row.isr)
        and any(b in live for b in row.isr if b != broker_id)
    ]
    changes = elect_leaders(rows)
    logger.info(
        "controlled shutdown of broker %s: %s partition(s) changed", broker_id, len(changes)
    )
    return Partition.objects.filter(leader=broker_id).count()


def preferred_leader_election() -> list[Change]:
    """Give each partition back to its first replica where that one is live and in sync."""
    live = live_broker_ids()
    changes = []
    rows = Partition.objects.exclude(replicas=[]).select_related("topic")
    for row in rows:
        preferred = row.replicas[0]
        if row.leader != preferred and preferred in live and preferred in row.isr:
            with transaction.atomic():
                change = _cas(row, leader=preferred, isr=list(row.isr), reason="preferred leader")
            if change is not None:
                changes.append(change)
    return changes


def elect_requested(
    partition: Partition, *, unclean: bool, actor: Actor, attempts: int = 5
) -> ErrorCode:
    """Kafka's ElectLeaders for one partition, asked for by ``actor`` (an operator): the
    rules are :func:`data_plane.metadata.election.requested_election`'s. An unclean
    election does not wait for ``unclean.leader.election.enable`` (KIP-460: the operator
    asked for it), and is audited as the controller's own."""
    live = live_broker_ids()
    current: Partition | None = partition
    for _ in range(attempts):
        if current is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        decided = requested_election(
            list(current.replicas), list(current.isr), current.leader, live, unclean
        )
        if decided.error_code != ErrorCode.NONE:
            return decided.error_code
        reason = "unclean election (requested)" if decided.unclean else "election requested"
        with transaction.atomic():
            change = _cas(current, leader=decided.leader, isr=list(decided.isr), reason=reason)
            if change is not None and decided.unclean:
                _audit_unclean(current, decided.leader, actor)
        if change is not None:
            return ErrorCode.NONE
        # Another controller changed the row first: decide again from what it did.
        current = Partition.objects.select_related("topic__tenant").filter(pk=current.pk).first()
    return ErrorCode.REQUEST_TIMED_OUT


def controller_tick() -> list[Change]:
    """One pass of the controller: fence expired brokers, fix leadership, then switch the
    reassignments whose new replicas have caught up."""
    from control_plane.controller.reassign import complete_reassignments

    fence_expired_brokers()
    return elect_leaders() + complete_reassignments()


@dataclass(frozen=True)
class AlterResult:
    error: int
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


def alter_partition(
    topic_id: str,
    index: int,
    *,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: list[int],
) -> AlterResult:
    """A leader's ISR proposal (Kafka's AlterPartition), applied only if nothing moved."""
    row = (
        Partition.objects.select_related("topic")
        .filter(topic__topic_id=topic_id, index=index)
        .first()
    )
    if row is None:
        return AlterResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    current = AlterResult(ErrorCode.NONE, row.leader_epoch, row.partition_epoch, tuple(row.isr))
    if row.leader != leader or leader_epoch != row.leader_epoch:
        return AlterResult(ErrorCode.FENCED_LEADER_EPOCH, *_epochs(current))
    if partition_epoch != row.partition_epoch:
        return AlterResult(ErrorCode.INVALID_UPDATE_VERSION, *_epochs(current))
    if leader not in new_isr or not set(new_isr) <= set(row.replicas):
        return AlterResult(ErrorCode.INVALID_REQUEST, *_epochs(current))
    ordered = [b for b in row.replicas if b in set(new_isr)]
    live = live_broker_ids()
    if any(b not in live and b not in row.isr for b in ordered):
        return AlterResult(ErrorCode.INELIGIBLE_REPLICA, *_epochs(current))
    with transaction.atomic():
        change = _cas(row, leader=leader, isr=ordered, reason="AlterPartition")
    if change is None:
        return AlterResult(ErrorCode.INVALID_UPDATE_VERSION, *_epochs(current))
    if row.adding_replicas and set(row.replicas) - set(row.removing_replicas) <= set(ordered):
        # The last new replica caught up: switch the reassignment now, not at the next tick.
        # The leader learns the switch (and the partition epoch after it) from the metadata.
        from control_plane.controller.reassign import complete_reassignments

        complete_reassignments([row.pk])
    return AlterResult(ErrorCode.NONE, row.leader_epoch, row.partition_epoch + 1, tuple(ordered))


def _epochs(result: AlterResult) -> tuple[int, int, tuple[int, ...]]:
    return result.leader_epoch, result.partition_epoch, result.isr
