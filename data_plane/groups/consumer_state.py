"""What a consumer-protocol (KIP-848) group is made of, in memory and as stored.

:class:`ConsumerGroup` and :class:`ConsumerMember` are the coordinator's live state (owned
by the event loop: never touched from another thread); ``record()`` turns a group into the
:class:`~data_plane.groups.model.GroupRecord` the store keeps, and the coordinator rebuilds
one from it. Partitions are kept by topic id (a string), so a topic deleted and created
again under the same name is a different topic.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from data_plane.groups.assignors import DEFAULT_ASSIGNOR
from data_plane.groups.clock import TimerHandle
from data_plane.groups.model import (
    ConsumerMemberRecord,
    GroupRecord,
    GroupState,
    GroupType,
    TopicPartitions,
)
from data_plane.protocol.errors import ErrorCode

E = ErrorCode
S = GroupState

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

STABLE = "stable"
UNREVOKED = "unrevoked_partitions"
UNRELEASED = "unreleased_partitions"

# topic id (str) -> partitions
Parts = dict[str, frozenset[int]]
# What a member's subscription resolves to: topic name -> (topic id, partition count).
Resolved = dict[str, tuple[str, int]]
# (subscribed names, compiled regex or None) -> the topics they name now, for one member
Resolver = Callable[[tuple[str, ...], "re.Pattern[str] | None"], Resolved]


@dataclass(frozen=True)
class ConsumerConfig:
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    max_size: int = 1_000  # group.consumer.max.size


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Parts | None  # None: unchanged since the member last heard it


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: str = STABLE
    assigned: Parts = field(default_factory=dict)
    revoking: Parts = field(default_factory=dict)
    topics: Resolved = field(default_factory=dict)
    # A member that joined with JoinGroup (classic protocol) into a consumer group: the
    # protocols it offered (name, subscription bytes) and its session timeout.
    classic_protocols: list[tuple[str, bytes]] | None = None
    classic_session_timeout_ms: int = 0
    expiry: TimerHandle | None = None
    revocation_timer: TimerHandle | None = None

    @property
    def classic(self) -> bool:
        return self.classic_protocols is not None

    def owned(self) -> set[tuple[str, int]]:
        return {
            (t, p)
            for parts in (self.assigned, self.revoking)
            for t, ps in parts.items()
            for p in ps
        }


@dataclass
class ConsumerGroup:
    tenant_id: int
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = DEFAULT_ASSIGNOR
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Parts] = field(default_factory=dict)  # member id -> its target
    owners: dict[tuple[str, int], str] = field(default_factory=dict)  # partition -> member
    state_since_ms: int = 0
    last_state: GroupState = S.EMPTY
    version: int = 0
    persisted: int = 0
    writer: asyncio.Task[None] | None = None

    @property
    def state(self) -> GroupState:
        if not self.members:
            return S.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return S.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != STABLE:
                return S.RECONCILING
        return S.STABLE

    def record(self) -> GroupRecord:
        return GroupRecord(
            tenant_id=self.tenant_id,
            group_id=self.group_id,
            state=self.state,
            generation=self.group_epoch,
            protocol_type="consumer",
            protocol_name=self.assignor,
            leader=None,
            members=(),
            state_since_ms=self.state_since_ms,
            group_type=GroupType.CONSUMER,
            assignment_epoch=self.assignment_epoch,
            consumer_members=tuple(
                ConsumerMemberRecord(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    client_id=m.client_id,
                    host=m.host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    server_assignor=m.server_assignor,
                    member_epoch=m.member_epoch,
                    previous_member_epoch=m.previous_member_epoch,
                    state=m.state,
                    assigned=to_record(m.assigned),
                    revoking=to_record(m.revoking),
                    target=to_record(self.target.get(m.member_id, {})),
                    resolved=tuple(sorted((n, t, c) for n, (t, c) in m.topics.items())),
                    classic_protocols=None
                    if m.classic_protocols is None
                    else tuple(m.classic_protocols),
                    classic_session_timeout_ms=m.classic_session_timeout_ms,
                )
                for m in self.members.values()
            ),
        )


def to_record(parts: Mapping[str, frozenset[int]]) -> TopicPartitions:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(parts.items()) if ps)


def from_record(parts: TopicPartitions) -> Parts:
    return {t: frozenset(ps) for t, ps in parts if ps}


def minus(a: Parts, b: Mapping[str, frozenset[int]]) -> Parts:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def intersect(a: Parts, b: Mapping[str, frozenset[int]]) -> Parts:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def still_owns(a: Parts | None, b: Parts) -> bool:
    """Whether the member still reports any of ``b`` (None: it did not say, so it may)."""
    if a is None:
        return True
    return any(a.get(t, frozenset()) & ps for t, ps in b.items())


def owns_only(a: Parts | None, b: Parts) -> bool:
    if a is None:
        return False
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())
