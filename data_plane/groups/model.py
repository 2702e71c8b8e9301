"""What the coordinator persists and the control plane reads: groups and offsets."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


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


@dataclass(frozen=True)
class OffsetRecord:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int = 0
