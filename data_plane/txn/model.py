"""A transactional id's state, as KIP-98 defines the transaction coordinator's (Step 13).

One :class:`TxnMetadata` per (tenant, transactional id): the producer id and epoch the
coordinator handed out, the transaction's timeout, its state, and what the transaction
touched (partitions by topic id, consumer groups by id). Values are immutable; a
transition makes a new one and checks it is allowed (Kafka's ``TransactionState``
valid-previous-states table):

============================  ================================================
state                         may follow
============================  ================================================
Empty                         Empty, CompleteCommit, CompleteAbort
Ongoing                       Ongoing, Empty, CompleteCommit, CompleteAbort
PrepareCommit                 Ongoing
PrepareAbort                  Ongoing, PrepareEpochFence, and (transactions V2: an
                              abort with nothing to abort) Empty, CompleteCommit,
                              CompleteAbort
CompleteCommit                PrepareCommit
CompleteAbort                 PrepareAbort
Dead                          Empty, CompleteCommit, CompleteAbort
PrepareEpochFence             Ongoing
============================  ================================================
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# An epoch at this value is not bumped further: the transactional id gets a new producer
# id at epoch 0 instead (Kafka: Short.MaxValue - 1).
MAX_PRODUCER_EPOCH = 32766


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def preparing(self) -> bool:
        """Markers are being written: the client must wait (CONCURRENT_TRANSACTIONS)."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def deciding(self) -> bool:
        """A decision or a fence is under way: requests wait (CONCURRENT_TRANSACTIONS)."""
        return self.preparing or self is TxnState.PREPARE_EPOCH_FENCE

    @property
    def unfinished(self) -> bool:
        """In progress or being decided: its coordinator has work to do."""
        return self is TxnState.ONGOING or self.deciding

    @property
    def complete(self) -> bool:
        """No transaction in progress: a new one may start."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset(
        {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
    ),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


class IllegalTransition(Exception):
    """A transition the state table does not allow (a coordinator bug, never a client's)."""


@dataclass(frozen=True)
class TxnPartition:
    """A partition of a transaction, by topic id (a name may be deleted and reused)."""

    topic_id: str
    index: int


@dataclass(frozen=True)
class TxnMetadata:
    tenant_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int  # the epoch before the last bump (KIP-360 retries)
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TxnPartition] = frozenset()
    groups: frozenset[str] = frozenset()  # consumer groups of AddOffsetsToTxn
    start_ms: int = -1  # when the transaction in progress began
    updated_ms: int = -1
    # Bumped by each durable write; a store keeps a write only on top of the version it
    # replaces, so of two brokers that both think they coordinate the id (the placement
    # moved), only one can change it.
    version: int = 0
    # Bumped by each coordinator that takes the id over (reads it from the store); its
    # markers carry it, and a partition refuses markers from an older one (Kafka's
    # coordinator epoch, TRANSACTION_COORDINATOR_FENCED).
    coordinator_epoch: int = 0
    # Transactions V2 (KIP-890 part 2), when the epoch bumped at the end of a transaction
    # would pass MAX_PRODUCER_EPOCH: the producer id the id moves to once the transaction
    # is complete, and after that the one it moved from (a retried EndTxn names it).
    next_producer_id: int = NO_PRODUCER_ID
    previous_producer_id: int = NO_PRODUCER_ID

    def to(self, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
        """This metadata in ``state`` with ``changes`` applied, at ``now_ms``."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.state.value} -> {state.value} is not allowed"
            )
        return dataclasses.replace(self, state=state, updated_ms=now_ms, **changes)  # type: ignore[arg-type]

    def expired(self, now_ms: int) -> bool:
        """A transaction in progress for longer than its timeout (the coordinator aborts
        it, as Kafka's ``transaction.abort.timed.out.transaction.cleanup.interval.ms``)."""
        return self.state is TxnState.ONGOING and now_ms - self.start_ms > self.timeout_ms
