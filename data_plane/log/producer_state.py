"""Idempotent-producer state of one partition: duplicate and ordering checks.

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
    ) -> None:
        """Remember a batch that was appended (``timestamp``: its max timestamp)."""
        entry = self._producers.get(producer_id)
        last = last_sequence(base_sequence, last_offset_delta)
        if entry is None or epoch != entry.epoch:
            entry = _Entry(epoch, last)
            self._producers[producer_id] = entry
        entry.last_sequence = last
        entry.last_timestamp = timestamp
        entry.batches.append((base_sequence, last, first_offset))

    def active(self) -> list[ActiveProducer]:
        """The producers this partition remembers, by producer id."""
        return [
            ActiveProducer(pid, e.epoch, e.last_sequence, e.last_timestamp)
            for pid, e in sorted(self._producers.items())
        ]

    def forget_from(self, offset: int) -> None:
        """Drop what truncation removed (batches at or after ``offset``)."""
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
                str(pid): [e.epoch, e.last_sequence, [list(b) for b in e.batches], e.last_timestamp]
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
                for first_seq, last_seq, first_offset in batches:
                    entry.batches.append((int(first_seq), int(last_seq), int(first_offset)))
                state._producers[int(pid)] = entry
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a producer-state snapshot: {exc}") from exc
        return state

    def __len__(self) -> int:
        return len(self._producers)
