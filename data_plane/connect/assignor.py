"""The leader's assignment of connectors and tasks to the workers of a Connect group:
incremental and cooperative, as Kafka Connect's (KIP-415).

Work is an :data:`Item`: ``(connector, -1)`` for a connector itself, ``(connector, n)``
for its task ``n``. Each round the leader sees what every member runs now and what the
configs want, and answers each member with what it keeps or gets (``assigned``) and
what it must stop first (``revoked``):

* work no longer configured is revoked from its worker;
* work of a worker that left is *lost*: it waits ``scheduled.rebalance.max.delay.ms``
  for the worker to come back (members are told the delay left, and rejoin when it is
  over), unless a new worker joined meanwhile, which then gets it; after the delay it is
  given to the others;
* unassigned work goes to the least-loaded workers, connectors and tasks balanced apart;
* a worker holding more than its share gives the excess up (revoked), and a second round
  gives that to the others: nothing runs twice, nothing stops that need not.

Pure: the clock is passed in; the leader keeps one :class:`IncrementalAssignor` between
rounds (what it assigned last, and since when lost work has waited).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable

Item = tuple[str, int]
CONNECTOR = -1


@dataclasses.dataclass(frozen=True)
class Member:
    member_id: str
    worker_id: str
    owned: frozenset[Item]


@dataclasses.dataclass(frozen=True)
class Assignment:
    assigned: frozenset[Item]
    revoked: frozenset[Item]
    delay_ms: int


def wanted_items(tasks_per_connector: dict[str, int]) -> set[Item]:
    """Every connector and its tasks."""
    items: set[Item] = set()
    for name, count in tasks_per_connector.items():
        items.add((name, CONNECTOR))
        items.update((name, i) for i in range(count))
    return items


class IncrementalAssignor:
    def __init__(self, max_delay_ms: int, clock: Callable[[], float]) -> None:
        self.max_delay_ms = max_delay_ms
        self.clock = clock  # seconds
        self.previous: dict[Item, str] = {}  # item -> worker id, as last assigned
        self.lost_deadline: float | None = None

    def assign(self, members: Iterable[Member], wanted: set[Item]) -> dict[str, Assignment]:
        members = sorted(members, key=lambda m: m.member_id)
        if not members:
            return {}
        now = self.clock()
        owned = {m.member_id: {i for i in m.owned if i in wanted} for m in members}
        revoked = {m.member_id: set(m.owned - owned[m.member_id]) for m in members}
        holder: dict[Item, str] = {}
        for m in members:  # the same work reported twice: kept by the first
            for item in sorted(owned[m.member_id]):
                if item in holder:
                    owned[m.member_id].discard(item)
                    revoked[m.member_id].add(item)
                else:
                    holder[item] = m.member_id
        unassigned = wanted - set(holder)
        present = {m.worker_id for m in members}
        lost = {i for i in unassigned if i in self.previous and self.previous[i] not in present}
        newcomers = any(not m.owned for m in members)
        delay_ms = 0
        held_back: set[Item] = set()
        if lost and not newcomers:
            if self.lost_deadline is None:
                self.lost_deadline = now + self.max_delay_ms / 1000
            if now < self.lost_deadline:
                held_back = lost
                delay_ms = max(1, math.ceil((self.lost_deadline - now) * 1000))
            else:
                self.lost_deadline = None
        elif not lost:
            self.lost_deadline = None
        unassigned -= held_back
        for is_task in (False, True):
            kind = {i for i in wanted if (i[1] != CONNECTOR) == is_task}
            if not kind:
                continue
            share = math.ceil(len(kind) / len(members))
            for m in members:
                mine = sorted(i for i in owned[m.member_id] if i in kind)
                for item in mine[share:]:  # more than its share: give the excess up first
                    owned[m.member_id].discard(item)
                    revoked[m.member_id].add(item)
            for item in sorted(unassigned & kind):
                target = min(
                    members,
                    key=lambda m: (sum(1 for i in owned[m.member_id] if i in kind), m.member_id),
                )
                owned[target.member_id].add(item)
        workers = {m.member_id: m.worker_id for m in members}
        self.previous = {i: workers[mid] for mid, items in owned.items() for i in items}
        for item in held_back:  # still the departed worker's until the delay is over
            self.previous[item] = "__lost__"
        return {
            mid: Assignment(frozenset(owned[mid]), frozenset(revoked[mid]), delay_ms)
            for mid in owned
        }
