"""Where a partition's replicas go: spread evenly, leaders too, racks when brokers have them.

The scheme follows the one Kafka documents for its admin tools. The brokers are ordered
so that consecutive brokers alternate racks. Partition ``p``'s first replica (its preferred
leader) is broker ``(start + p) % n``. The followers come after it at a shift (starting
from ``start`` too) that grows by one each time the partition index wraps around the
brokers, so follower sets vary too. With
racks, a follower whose rack already holds a replica of the partition is skipped while
some rack has none.

Pure: no Django. The caller passes the live brokers and a start index (random in
production, fixed in tests); the result is deterministic for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class PlacementError(ValueError):
    """The replication factor cannot be met by the live brokers."""


@dataclass(frozen=True)
class BrokerSlot:
    id: int
    rack: str | None = None


def rack_alternating(brokers: Sequence[BrokerSlot]) -> list[BrokerSlot]:
    """Brokers ordered so that consecutive ones are in different racks where possible."""
    by_rack: dict[str, list[BrokerSlot]] = {}
    for b in sorted(brokers, key=lambda b: b.id):
        by_rack.setdefault(b.rack or "", []).append(b)
    racks = sorted(by_rack)
    out: list[BrokerSlot] = []
    depth = 0
    while len(out) < len(brokers):
        for rack in racks:
            if depth < len(by_rack[rack]):
                out.append(by_rack[rack][depth])
        depth += 1
    return out


def assign_replicas(
    brokers: Sequence[BrokerSlot],
    partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    start: int = 0,
) -> list[list[int]]:
    """Replica lists (preferred leader first) for partitions ``first_partition`` onwards."""
    if replication_factor < 1:
        raise PlacementError("replication factor must be at least 1")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} live broker(s)"
        )
    ordered = rack_alternating(brokers)
    n = len(ordered)
    racks = {b.rack for b in ordered}
    rack_aware = None not in racks and len(racks) > 1
    result: list[list[int]] = []
    for p in range(first_partition, first_partition + partitions):
        first = (start + p) % n
        shift = 1 + (start + p // n) % max(1, n - 1)
        replicas = [ordered[first]]
        step = 0
        while len(replicas) < replication_factor:
            step += 1
            candidate = ordered[(first + shift * step) % n] if n > 1 else ordered[0]
            if candidate in replicas:
                # The shifted walk came back to a broker already used: take the next free
                # broker in order instead (keeps the walk finite and the result even).
                candidate = next(b for b in _after(ordered, first) if b not in replicas)
            if rack_aware and _rack_used(candidate, replicas, racks):
                alternative = next(
                    (
                        b
                        for b in _after(ordered, (first + shift * step) % n)
                        if b not in replicas and not _rack_used(b, replicas, racks)
                    ),
                    None,
                )
                if alternative is not None:
                    candidate = alternative
            replicas.append(candidate)
        result.append([b.id for b in replicas])
    return result


def _after(ordered: list[BrokerSlot], index: int) -> list[BrokerSlot]:
    return ordered[index + 1 :] + ordered[: index + 1]


def _rack_used(candidate: BrokerSlot, replicas: list[BrokerSlot], racks: set[str | None]) -> bool:
    """True if the candidate's rack holds a replica while some rack still holds none."""
    used = {r.rack for r in replicas}
    return candidate.rack in used and len(used) < len(racks)
