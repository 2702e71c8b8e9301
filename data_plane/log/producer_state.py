"""Idempotent-producer state of one partition: duplicate and ordering checks, and open
transactions.

For each producer id the partition remembers its epoch and its last five batches
(first/last sequence and first offset), as Kafka does (``max.in.flight`` ≤ 5). For a new
batch of an idempotent producer (producer id ≥ 0, base sequence ≥ 0):

* an older epoch than known is fenced (INVALID_PRODUCER_EPOCH);
* a newer epoch must start at sequence 0;
* a batch equal to one of the remembered ones is a retry: it is not appended again and the
  original first offset is returned (the producer sees success);
* otherwise its first sequence must follow the last one (int32 wrap-around), or it is out
  of order (OUT_OF_ORDER_SEQUENCE_NUMBER).

The state survives restarts as Kafka's does: :class:`PartitionLog` writes a snapshot
(``<offset>.snapshot``, the state as of that log offset) when a segment rolls and on clean
shutdown, and on open loads the newest snapshot not past the log end and replays the batch
headers after it. A retry that spans a restart is therefore still recognised.

For transactions (Step 13) it also remembers, per producer, where its open transaction
starts in this partition: a transactional batch opens one, a control batch (the
coordinator's commit or abort marker) ends it. The oldest open one bounds the partition's
last stable offset; snapshots keep them.

Not thread-safe on its own; :class:`PartitionLog` calls it under its lock.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

MAX_REMEMBERED_BATCHES = 5
SEQUENCE_MODULO = 2**31


class ProducerFenced(Exception):
    """The batch's producer epoch is older than the partition has seen."""


class CoordinatorFenced(Exception):
    """A marker from a transaction coordinator older than one whose marker the partition
    has already taken for this producer (Kafka's TRANSACTION_COORDINATOR_FENCED)."""


class OutOfOrderSequence(Exception):
    """The batch's first sequence does not follow the producer's last one."""


@dataclass(frozen=True)
class Duplicate:
    first_offset: int


@dataclass
class _Entry:
    epoch: int
    last_sequence: int
    batches: deque[tuple[int, int, int]] = field(
        default_factory=lambda: deque(maxlen=MAX_REMEMBERED_BATCHES)
    )  # (first sequence, last sequence, first offset)
    last_timestamp: int = -1  # the newest batch's max timestamp (-1: not known)
    txn_first_offset: int | None = None  # the transaction in progress here (Step 13)
    coordinator_epoch: int = -1  # the coordinator epoch of the producer's last marker here


@dataclass(frozen=True)
class ActiveProducer:
    """What DescribeProducers reports of one producer of a partition."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    return (base_sequence + last_offset_delta) % SEQUENCE_MODULO


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, _Entry] = {}
        # Producer id -> first offset of its open transaction: the LSO is read on every
        # read_committed fetch, so it must not walk every producer.
        self._open: dict[int, int] = {}

    def check(
        self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int
    ) -> Duplicate | None:
        """Validate a batch before it is appended; raise, return a Duplicate, or None."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise ProducerFenced(f"producer {producer_id} epoch {epoch} < {entry.epoch}")
        if epoch > entry.epoch:
            if base_sequence != 0:
                raise OutOfOrderSequence(
                    f"new epoch {epoch} of producer {producer_id} must start at sequence 0"
                )
            return None
        last = last_sequence(base_sequence, last_offset_delta)
        for first_seq, last_seq, first_offset in entry.batches:
            if first_seq == base_sequence and last_seq == last:
                return Duplicate(first_offset)
        expected = (entry.last_sequence + 1) % SEQUENCE_MODULO
        if base_sequence != expected:
            raise OutOfOrderSequence(
                f"producer {producer_id} sent sequence {base_sequence}, expected {expected}"
            )
        return None

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        last_offset_delta: int,
        first_offset: int,
        timestamp: int = -1,
        transactional: bool = False,
    ) -> None:
        """Remember a batch that was appended (``timestamp``: its max timestamp). A
        transactional batch starts the producer's transaction here if none is open."""
        entry = self._producers.get(producer_id)
        last = last_sequence(base_sequence, last_offset_delta)
        if entry is None or epoch != entry.epoch:
            ongoing = entry.txn_first_offset if entry is not None else None
            entry = _Entry(epoch, last, txn_first_offset=ongoing)
            self._producers[producer_id] = entry
        entry.last_sequence = last
        entry.last_timestamp = timestamp
        entry.batches.append((base_sequence, last, first_offset))
        if transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = first_offset
            self._open[producer_id] = first_offset

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Validate a coordinator's marker before it is appended: a producer epoch older
        than the partition's for the producer is fenced (ProducerFenced), and so is a
        coordinator epoch older than that of the producer's last marker here
        (CoordinatorFenced): a deposed coordinator, still writing markers of a transaction
        its successor has finished, must not end the producer's next one."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise ProducerFenced(
                f"marker of producer {producer_id} at epoch {epoch} < {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise CoordinatorFenced(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch} "
                f"< {entry.coordinator_epoch}"
            )

    def end_transaction(
        self, producer_id: int, epoch: int | None = None, coordinator_epoch: int = -1
    ) -> int | None:
        """A marker (at producer ``epoch``, from ``coordinator_epoch``) ended the producer's
        transaction here: its first offset (None if none was open: a marker for a
        partition the transaction never wrote to). A marker at a newer producer epoch (a
        fenced producer's transaction aborted by its coordinator) makes that epoch the
        producer's here, so the fenced producer's later batches are refused."""
        entry = self._producers.get(producer_id)
        if entry is None:
            if epoch is None:
                return None
            entry = self._producers[producer_id] = _Entry(epoch, -1)
        if epoch is not None and epoch > entry.epoch:
            entry.epoch, entry.last_sequence = epoch, -1
            entry.batches.clear()
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        first, entry.txn_first_offset = entry.txn_first_offset, None
        self._open.pop(producer_id, None)
        return first

    def in_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether the producer, at this epoch, has a transaction open here (its later
        batches in the transaction need no check with the coordinator)."""
        entry = self._producers.get(producer_id)
        return producer_id in self._open and entry is not None and entry.epoch == epoch

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction still open here."""
        return min(self._open.values()) if self._open else None

    def active(self) -> list[ActiveProducer]:
        """The producers this partition remembers, by producer id."""
        return [
            ActiveProducer(pid, e.epoch, e.last_sequence, e.last_timestamp)
            for pid, e in sorted(self._producers.items())
        ]

    def forget_from(self, offset: int) -> None:
        """Drop what truncation removed (batches at or after ``offset``), for a log that
        holds no transactions: a transaction's start or end may have been cut, which
        only a replay can tell (``PartitionLog`` replays then)."""
        if self._open:
            raise ValueError("forget_from on a log with open transactions")
        for producer_id in list(self._producers):
            entry = self._producers[producer_id]
            kept = [b for b in entry.batches if b[2] < offset]
            if not kept:
                del self._producers[producer_id]
                continue
            entry.batches = deque(kept, maxlen=MAX_REMEMBERED_BATCHES)
            entry.last_sequence = kept[-1][1]

    def to_json(self) -> bytes:
        return json.dumps(
            {
                str(pid): [
                    e.epoch,
                    e.last_sequence,
                    [list(b) for b in e.batches],
                    e.last_timestamp,
                    -1 if e.txn_first_offset is None else e.txn_first_offset,
                    e.coordinator_epoch,
                ]
                for pid, e in self._producers.items()
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ProducerStateManager:
        """Load a snapshot; raise ValueError if it is not one."""
        state = cls()
        try:
            raw: dict[str, Any] = json.loads(data)
            for pid, saved in raw.items():
                # [epoch, last sequence, batches] (+ the last timestamp since it was kept).
                epoch, last, batches = saved[:3]
                entry = _Entry(int(epoch), int(last))
                entry.last_timestamp = int(saved[3]) if len(saved) > 3 else -1
                if len(saved) > 4 and int(saved[4]) >= 0:  # an open transaction (Step 13)
                    entry.txn_first_offset = int(saved[4])
                    state._open[int(pid)] = entry.txn_first_offset
                if len(saved) > 5:
                    entry.coordinator_epoch = int(saved[5])
                for first_seq, last_seq, first_offset in batches:
                    entry.batches.append((int(first_seq), int(last_seq), int(first_offset)))
                state._producers[int(pid)] = entry
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a producer-state snapshot: {exc}") from exc
        return state

    def __len__(self) -> int:
        return len(self._producers)
