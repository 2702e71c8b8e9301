"""Moving replicas between brokers: reassignment, decommissioning, rebalancing.

A reassignment follows Kafka's (KIP-455) steps, each one compare-and-set on the partition
row like every other controller decision:

1. **Start**: ``replicas`` becomes the target replicas followed by the ones leaving;
   ``adding_replicas`` and ``removing_replicas`` say which are which. The leader stays.
   The new replicas start following the leader and **copy** the log from its start.
2. **Catch up**: the leader adds each new replica to the ISR once it has reached the high
   watermark (the ordinary AlterPartition path).
3. **Switch**: once every target replica is in the ISR, the controller's tick makes the
   target the replica set. If the leader is leaving, leadership moves to the first live
   target replica in the ISR in the same update, with a new leader epoch.
4. **Drop**: a broker that is no longer a replica stops following and deletes its copy.

Until the switch, a reassignment can be cancelled: the row goes back to the replicas it
had, and the new replicas drop what they copied.

Decommissioning a broker marks it (no new replicas are placed on it) and reassigns every
partition it holds, replacing it in place by the live broker with the fewest replicas,
preferring racks the partition does not use yet. Rebalancing, after adding a broker,
moves replicas from the fullest brokers to the emptiest until no two differ by more than
one. Both plan everything first and write it in one transaction, so a plan that cannot be
carried out changes nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from control_plane.audit.services import record_event
from control_plane.catalog.models import Broker, Partition
from control_plane.controller.services import Change, _cas, live_broker_ids
from control_plane.core.actor import Actor
from control_plane.core.errors import Conflict, InvalidInput, NotFound

logger = logging.getLogger("millrace.controller")


@dataclass(frozen=True)
class Move:
    """One partition's planned replica change."""

    partition: Partition
    target: list[int]

    @property
    def current(self) -> list[int]:
        return list(self.partition.replicas)


def is_reassigning(partition: Partition) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def target_replicas(partition: Partition) -> list[int]:
    """The replicas a partition will have once its reassignment (if any) completes."""
    leaving = set(partition.removing_replicas)
    return [b for b in partition.replicas if b not in leaving]


def eligible_broker_ids() -> set[int]:
    """Live brokers that may receive replicas (not being decommissioned)."""
    return set(
        Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS)
        .filter(decommissioning=False)
        .values_list("id", flat=True)
    )


# --- one partition --------------------------------------------------------------------------


def validate_target(partition: Partition, target: object, eligible: set[int]) -> list[int]:
    if not isinstance(target, list) or not target:
        raise InvalidInput("replicas must be a non-empty list of broker ids", field="replicas")
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in target):
        raise InvalidInput("replicas must be broker ids (integers)", field="replicas")
    if len(set(target)) != len(target):
        raise InvalidInput("replicas must not repeat a broker", field="replicas")
    rf = partition.topic.replication_factor
    if len(target) != rf:
        raise InvalidInput(
            f"the topic's replication factor is {rf}: give {rf} broker(s), not {len(target)}",
            field="replicas",
        )
    current = set(partition.replicas)
    for b in target:
        if b not in eligible and b not in current:
            raise InvalidInput(
                f"broker {b} is not live or is being decommissioned", field="replicas"
            )
    return list(target)


def _begin(move: Move, actor: Actor) -> Change | None:
    """Write one planned move (inside the caller's transaction)."""
    row = move.partition
    current = list(row.replicas)
    if move.target == current:
        return None
    if is_reassigning(row):
        raise Conflict(f"partition {row} is already being reassigned; cancel it first")
    adding = [b for b in move.target if b not in current]
    removing = [b for b in current if b not in move.target]
    replicas = [*move.target, *removing]
    change = _cas(
        row,
        leader=row.leader,
        isr=list(row.isr),
        reason="reassignment started" if adding or removing else "replicas reordered",
        replicas=replicas,
        adding_replicas=adding,
        removing_replicas=removing,
        original_replicas=current if adding or removing else [],
    )
    if change is None:
        raise Conflict(f"partition {row} changed while the reassignment was planned; retry")
    _audit(actor, row, "partition.reassignment_started", current, move.target)
    return change


def reassign(partition: Partition, target: object, actor: Actor) -> Change | None:
    """Start moving ``partition`` to the ``target`` replicas (preferred leader first)."""
    with transaction.atomic():
        row = _locked(partition)
        wanted = validate_target(row, target, eligible_broker_ids())
        return _begin(Move(row, wanted), actor)


def cancel(partition: Partition, actor: Actor) -> Change:
    """Put a partition back on the replicas it had before its reassignment started."""
    with transaction.atomic():
        row = _locked(partition)
        if not is_reassigning(row):
            raise Conflict(f"partition {row} is not being reassigned")
        adding = set(row.adding_replicas)
        original = list(row.original_replicas) or [b for b in row.replicas if b not in adding]
        isr = [b for b in original if b in row.isr]
        leader = row.leader
        if leader is not None and leader not in original:
            live = live_broker_ids()
            leader = next((b for b in original if b in isr and b in live), None)
            if leader is None:
                raise Conflict(
                    f"partition {row}: no original replica is live and in sync to lead again"
                )
        change = _cas(
            row,
            leader=leader,
            isr=isr or original[:1],
            reason="reassignment cancelled",
            replicas=original,
            adding_replicas=[],
            removing_replicas=[],
            original_replicas=[],
        )
        if change is None:
            raise Conflict(f"partition {row} changed meanwhile; retry")
        _audit(actor, row, "partition.reassignment_cancelled", target_replicas(row), original)
        return change


def _locked(partition: Partition) -> Partition:
    return (
        Partition.objects.select_for_update().select_related("topic__tenant").get(pk=partition.pk)
    )


def _audit(actor: Actor, row: Partition, action: str, before: list[int], after: list[int]) -> None:
    record_event(
        actor,
        tenant=row.topic.tenant,
        action=action,
        object_type="partition",
        object_id=f"{row.topic.topic_id}-{row.index}",
        object_repr=f"{row.topic.name}-{row.index}",
        before={"replicas": before},
        after={"replicas": after},
    )


# --- the controller's part ------------------------------------------------------------------


def complete_reassignments(pks: Iterable[int] | None = None) -> list[Change]:
    """Switch every reassignment (of the partitions ``pks``, default all) whose target
    replicas are all in the ISR."""
    live = live_broker_ids()
    changes = []
    rows = Partition.objects.exclude(adding_replicas=[], removing_replicas=[]).select_related(
        "topic__tenant"
    )
    if pks is not None:
        rows = rows.filter(pk__in=list(pks))
    for row in rows:
        target = target_replicas(row)
        if not all(b in row.isr for b in target):
            continue  # still copying
        leader = row.leader if row.leader in target and row.leader in live else None
        if leader is None:
            leader = next((b for b in target if b in live), None)
            if leader is None:
                continue  # no target replica is live to lead; wait
        with transaction.atomic():
            change = _cas(
                row,
                leader=leader,
                isr=[b for b in target if b in row.isr],
                reason="reassignment completed",
                replicas=target,
                adding_replicas=[],
                removing_replicas=[],
                original_replicas=[],
            )
            if change is not None:
                before = list(row.original_replicas)
                _audit(Actor.system(), row, "partition.reassignment_completed", before, target)
        if change is not None:
            changes.append(change)
    return changes


# --- many partitions ------------------------------------------------------------------------


def _replica_counts(rows: Iterable[Partition]) -> Counter[int]:
    counts: Counter[int] = Counter()
    for row in rows:
        counts.update(target_replicas(row))
    return counts


def _racks() -> dict[int, str]:
    return {b.id: b.rack for b in Broker.objects.all()}


def plan_decommission(broker_id: int, rows: list[Partition], eligible: set[int]) -> list[Move]:
    """Replace ``broker_id`` in every partition holding it by the emptiest eligible broker."""
    counts = _replica_counts(rows)
    racks = _racks()
    moves = []
    for row in rows:
        target = target_replicas(row)
        if broker_id not in target:
            continue
        if is_reassigning(row):
            raise Conflict(f"partition {row} is being reassigned; wait for it or cancel it first")
        others = [b for b in target if b != broker_id]
        used_racks = {racks.get(b, "") for b in others}
        candidates = [b for b in eligible if b not in target]
        if not candidates:
            raise Conflict(
                f"no live broker can take broker {broker_id}'s replica of {row} "
                f"(replication factor {len(target)}, {len(eligible)} eligible broker(s))"
            )
        choice = min(
            candidates,
            key=lambda b: (bool(racks.get(b)) and racks.get(b) in used_racks, counts[b], b),
        )
        counts[choice] += 1
        counts[broker_id] -= 1
        moves.append(Move(row, [choice if b == broker_id else b for b in target]))
    return moves


def plan_rebalance(rows: list[Partition], eligible: set[int], limit: int = 10_000) -> list[Move]:
    """Move replicas from the fullest eligible brokers to the emptiest, one at a time,
    until no two eligible brokers differ by more than one replica."""
    if len(eligible) < 2:
        return []
    racks = _racks()
    targets = {row.pk: target_replicas(row) for row in rows if not is_reassigning(row)}
    by_pk = {row.pk: row for row in rows}
    counts = Counter({b: 0 for b in eligible})
    for row in rows:  # partitions already moving count where they are going
        counts.update(b for b in target_replicas(row) if b in eligible)
    for _ in range(limit):
        hi = max(eligible, key=lambda b: (counts[b], -b))
        lo = min(eligible, key=lambda b: (counts[b], b))
        if counts[hi] - counts[lo] <= 1:
            break
        pk = _movable(targets, hi, lo, racks)
        if pk is None:
            break
        targets[pk] = [lo if b == hi else b for b in targets[pk]]
        counts[hi] -= 1
        counts[lo] += 1
    return [
        Move(by_pk[pk], replicas)
        for pk, replicas in targets.items()
        if replicas != target_replicas(by_pk[pk])
    ]


def _movable(targets: dict[int, list[int]], hi: int, lo: int, racks: dict[int, str]) -> int | None:
    """A partition on ``hi`` but not ``lo`` whose racks stay spread; followers first, so
    leadership moves only where nothing else can."""
    best: tuple[int, int] | None = None
    for pk, replicas in targets.items():
        if hi not in replicas or lo in replicas:
            continue
        others = {racks.get(b, "") for b in replicas if b != hi}
        if racks.get(lo) and racks.get(lo) in others and racks.get(hi) not in others:
            continue  # would put two replicas in one rack
        rank = 0 if replicas[0] != hi else 1
        if best is None or (rank, pk) < best:
            best = (rank, pk)
            if rank == 0:
                break
    return None if best is None else best[1]


def _assigned_rows() -> list[Partition]:
    return list(
        Partition.objects.exclude(replicas=[])
        .select_related("topic__tenant")
        .select_for_update(of=("self",))
        .order_by("topic_id", "index")
    )


def _apply(moves: list[Move], actor: Actor) -> list[Change]:
    changes = []
    for move in moves:
        change = _begin(move, actor)
        if change is not None:
            changes.append(change)
    return changes


def decommission_broker(broker_id: int, actor: Actor, *, dry_run: bool = False) -> list[Move]:
    """Stop placing replicas on a broker and start moving every replica it holds."""
    with transaction.atomic():
        broker = Broker.objects.select_for_update().filter(id=broker_id).first()
        if broker is None:
            raise NotFound(f"broker {broker_id} is not registered")
        moves = plan_decommission(broker_id, _assigned_rows(), eligible_broker_ids() - {broker_id})
        if dry_run:
            return moves
        if not broker.decommissioning:
            broker.decommissioning = True
            broker.save(update_fields=["decommissioning"])
        _apply(moves, actor)
        record_event(
            actor,
            tenant=None,
            action="broker.decommission",
            object_type="broker",
            object_id=broker_id,
            object_repr=str(broker),
            after={"partitions_moving": len(moves)},
        )
    logger.warning("decommissioning broker %s: moving %s replica(s)", broker_id, len(moves))
    return moves


def recommission_broker(broker_id: int, actor: Actor) -> None:
    """Let a broker receive replicas again (moves already made stay)."""
    with transaction.atomic():
        updated = Broker.objects.filter(id=broker_id).update(decommissioning=False)
        if not updated:
            raise NotFound(f"broker {broker_id} is not registered")
        record_event(
            actor,
            tenant=None,
            action="broker.recommission",
            object_type="broker",
            object_id=broker_id,
            object_repr=f"broker {broker_id}",
        )


def rebalance(actor: Actor, *, dry_run: bool = False) -> list[Move]:
    """Spread replicas evenly over the eligible brokers (after adding a broker)."""
    with transaction.atomic():
        moves = plan_rebalance(_assigned_rows(), eligible_broker_ids())
        if not dry_run:
            _apply(moves, actor)
    return moves
