"""Elections an operator asks for (Kafka's ElectLeaders, KIP-460), decided the same way by
the in-memory store and the controller: the rules of Kafka's KRaft controller."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from data_plane.protocol.errors import ErrorCode


@dataclass(frozen=True)
class Requested:
    """What one partition's requested election comes to: ``error_code`` NONE with the new
    ``leader`` and ``isr``, or the error to answer with (nothing changes)."""

    error_code: ErrorCode
    leader: int | None = None
    isr: tuple[int, ...] = ()
    unclean: bool = False  # an out-of-sync replica was elected: records may be lost


def requested_election(
    replicas: Sequence[int],
    isr: Sequence[int],
    leader: int | None,
    live: Collection[int],
    unclean: bool,
) -> Requested:
    """Preferred: the first replica leads if it is live and in the ISR. Unclean: only a
    partition without a live leader; the first live in-sync replica, else (whatever the
    topic's ``unclean.leader.election.enable``: the operator asked) the first live one."""
    if not replicas:
        if unclean:
            return Requested(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        return Requested(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
    in_sync = [b for b in isr if b in replicas]
    if not unclean:
        preferred = replicas[0]
        if leader == preferred and preferred in live:
            return Requested(ErrorCode.ELECTION_NOT_NEEDED)
        if preferred not in live or preferred not in in_sync:
            return Requested(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
        return Requested(ErrorCode.NONE, preferred, tuple(isr))
    if leader is not None and leader in live:
        return Requested(ErrorCode.ELECTION_NOT_NEEDED)
    live_isr = [b for b in in_sync if b in live]
    candidates = [b for b in replicas if b in live_isr]
    if candidates:
        return Requested(ErrorCode.NONE, candidates[0], tuple(live_isr))
    live_replicas = [b for b in replicas if b in live]
    if live_replicas:
        return Requested(ErrorCode.NONE, live_replicas[0], (live_replicas[0],), unclean=True)
    return Requested(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
