"""What the coordinator persists and the control plane reads: groups and offsets."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class GroupState(StrEnum):
    """Kafka's group states: a classic group's, and a consumer-protocol group's (KIP-848:
    Empty, Assigning, Reconciling, Stable, Dead)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupType(StrEnum):
    """Which rebalance protocol a group runs (ListGroups v5's ``group_type``)."""

    CLASSIC = "classic"
    CONSUMER = "consumer"


# A set of partitions by topic id: ((topic id, (partition, ...)), ...), both sorted.
TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    metadata: bytes  # the member's metadata for the group's chosen protocol
    assignment: bytes


@dataclass(frozen=True)
class ConsumerMemberRecord:
    """A KIP-848 member as stored: its subscription, epochs, reconciliation state, the
    partitions it owns (``assigned`` and ``revoking``) and its share of the target."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    member_epoch: int
    previous_member_epoch: int
    state: str  # stable | unrevoked_partitions | unreleased_partitions
    assigned: TopicPartitions
    revoking: TopicPartitions
    target: TopicPartitions
    # What the subscription named when last resolved: (topic name, topic id, partitions).
    resolved: tuple[tuple[str, str, int], ...] = ()
    # A classic-protocol member of a consumer group (during an online upgrade): the
    # protocols it joined with (name, metadata) and its session timeout.
    classic_protocols: tuple[tuple[str, bytes], ...] | None = None
    classic_session_timeout_ms: int = 0


@dataclass(frozen=True)
class GroupRecord:
    tenant_id: int
    group_id: str
    state: GroupState
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    members: tuple[MemberRecord, ...]
    state_since_ms: int
    # A consumer-protocol group: ``generation`` is its group epoch, ``protocol_name`` its
    # assignor, ``protocol_type`` "consumer", and its members are ``consumer_members``.
    group_type: GroupType = GroupType.CLASSIC
    assignment_epoch: int = 0
    consumer_members: tuple[ConsumerMemberRecord, ...] = ()


@dataclass(frozen=True)
class OffsetRecord:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int = 0
