"""The server-side assignors of consumer-protocol groups (KIP-848): ``uniform`` and ``range``.

The coordinator, not a group leader, decides who consumes what. An assignor sees each
member's subscribed topic ids, each subscribed topic's partition count, and the current
target assignment (so it can be sticky), and returns the new target: member id ->
topic id -> partitions. Every partition of a subscribed topic goes to exactly one member
subscribed to it. Both are deterministic (members and topics are taken in sorted order),
so a coordinator that takes over computes what its predecessor would have.

* ``uniform`` (Kafka's default): as even as the subscriptions allow, and sticky: a member
  keeps what it had as long as that does not leave it above its fair share. With
  identical subscriptions every member ends with ⌊P/N⌋ or ⌈P/N⌉ partitions and the
  fewest possible move; with different subscriptions no partition could move to a member
  subscribed to it with two or more fewer partitions.
* ``range``: per topic, the members subscribed to it (sorted) take contiguous ranges,
  the first ``P mod N`` one more; members with the same subscriptions get the same
  partition numbers of every topic (co-partitioning), as Kafka's range assignor does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

# member id -> topic id -> partitions
Assignment = dict[str, dict[str, frozenset[int]]]


class Assignor(Protocol):
    name: str

    def assign(
        self,
        subscriptions: Mapping[str, frozenset[str]],
        partitions: Mapping[str, int],
        current: Mapping[str, Mapping[str, frozenset[int]]],
    ) -> Assignment:
        """``subscriptions``: member id -> subscribed topic ids (topics that exist);
        ``partitions``: topic id -> partition count; ``current``: the target so far."""
        ...


def _freeze(owned: dict[str, dict[str, set[int]]]) -> Assignment:
    return {
        member: {topic: frozenset(parts) for topic, parts in sorted(topics.items()) if parts}
        for member, topics in owned.items()
    }


class UniformAssignor:
    name = "uniform"

    def assign(
        self,
        subscriptions: Mapping[str, frozenset[str]],
        partitions: Mapping[str, int],
        current: Mapping[str, Mapping[str, frozenset[int]]],
    ) -> Assignment:
        members = sorted(subscriptions)
        owned: dict[str, dict[str, set[int]]] = {m: {} for m in members}
        count = dict.fromkeys(members, 0)
        eligible = {t: [m for m in members if t in subscriptions[m]] for t in sorted(partitions)}
        total = sum(n for t, n in partitions.items() if eligible[t])
        # A member's fair share if everyone could take anything: stickiness never keeps
        # more than this; the balancing pass below settles the rest.
        cap = -(-total // len(members)) if members else 0
        taken: set[tuple[str, int]] = set()
        for m in members:
            for topic, parts in sorted(current.get(m, {}).items()):
                if topic not in subscriptions[m] or topic not in partitions:
                    continue
                for p in sorted(parts):
                    if count[m] >= cap:
                        break
                    if p < partitions[topic] and (topic, p) not in taken:
                        taken.add((topic, p))
                        owned[m].setdefault(topic, set()).add(p)
                        count[m] += 1
        for topic, who in eligible.items():
            if not who:
                continue
            for p in range(partitions[topic]):
                if (topic, p) in taken:
                    continue
                m = min(who, key=lambda x: (count[x], x))
                owned[m].setdefault(topic, set()).add(p)
                count[m] += 1
        self._balance(owned, count, subscriptions)
        return _freeze(owned)

    @staticmethod
    def _balance(
        owned: dict[str, dict[str, set[int]]],
        count: dict[str, int],
        subscriptions: Mapping[str, frozenset[str]],
    ) -> None:
        """Move partitions from the most loaded members to eligible ones with at least two
        fewer, until none can move; each move lowers the sum of squared counts, so this
        ends."""
        moved = True
        while moved:
            moved = False
            for giver in sorted(count, key=lambda m: (-count[m], m)):
                for topic in sorted(owned[giver]):
                    takers = [
                        m
                        for m in count
                        if topic in subscriptions[m] and count[m] + 2 <= count[giver]
                    ]
                    if not takers:
                        continue
                    taker = min(takers, key=lambda m: (count[m], m))
                    p = max(owned[giver][topic])
                    owned[giver][topic].discard(p)
                    owned[taker].setdefault(topic, set()).add(p)
                    count[giver] -= 1
                    count[taker] += 1
                    moved = True
                    break
                if moved:
                    break


class RangeAssignor:
    name = "range"

    def assign(
        self,
        subscriptions: Mapping[str, frozenset[str]],
        partitions: Mapping[str, int],
        current: Mapping[str, Mapping[str, frozenset[int]]],
    ) -> Assignment:
        members = sorted(subscriptions)
        owned: dict[str, dict[str, set[int]]] = {m: {} for m in members}
        for topic in sorted(partitions):
            who = [m for m in members if topic in subscriptions[m]]
            if not who:
                continue
            n = partitions[topic]
            base, extra = divmod(n, len(who))
            start = 0
            for i, m in enumerate(who):
                size = base + (1 if i < extra else 0)
                if size:
                    owned[m][topic] = set(range(start, start + size))
                start += size
        return _freeze(owned)


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
DEFAULT_ASSIGNOR = "uniform"
