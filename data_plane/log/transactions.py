"""Transactions in a partition log (Step 13): control markers, the aborted-transaction
index of each segment, and what a read at ``read_committed`` needs from them.

A transactional producer's batches carry the transactional bit; its transaction ends in
each partition with a control batch (control and transactional bits) holding one record
whose key is ``version int16, type int16`` (0: abort, 1: commit) and whose value is
``version int16, coordinator epoch int32`` (KIP-98). The log keeps, per producer, the
first offset of its transaction in progress (``producer_state``); an abort marker adds
an entry to the active segment's ``<base>.txnindex`` — Kafka's layout, 34 bytes: version
int16 (0), producer id int64, first offset int64, last offset int64 (the marker's), last
stable offset int64 (the log's LSO once the marker is in) — so a read at
``read_committed`` can return the aborted transactions in its range and the consumer can
drop their records. Commits leave nothing behind but the marker.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from data_plane.records.batch import BATCH_HEADER_SIZE, BatchHeader, InvalidRecordBatch

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset
    last_stable_offset: int  # the log's LSO once the marker was appended


class AbortedSweep:
    """Which batches of a read_committed Fetch belong to aborted transactions, as Kafka's
    consumers tell them apart: asked about each batch in offset order, a producer's
    transactional batches are aborted from the first offset of one of its aborted
    transactions (``aborted``: the Fetch's (producer id, first offset) pairs) until its
    control batch, the abort marker, which is aborted too and ends it."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda t: t[1])  # by first offset
        self._next = 0
        self._open: set[int] = set()  # producers whose aborted transaction is being read

    def aborted(self, header: BatchHeader) -> bool:
        while self._next < len(self._pending) and (
            self._pending[self._next][1] <= header.last_offset
        ):
            self._open.add(self._pending[self._next][0])
            self._next += 1
        if not header.is_transactional or header.producer_id not in self._open:
            return False
        if header.is_control:
            self._open.discard(header.producer_id)  # its marker: the abort ends here
        return True


def control_type(batch: bytes | bytearray | memoryview) -> ControlType:
    """The type of a control batch's marker (the batch is uncompressed, as Kafka writes
    them: one record whose key is version int16, type int16)."""
    return control_marker(batch)[0]


def control_marker(batch: bytes | bytearray | memoryview) -> tuple[ControlType, int]:
    """(type, coordinator epoch) of a control batch's marker: the record's key is version
    int16, type int16; its value version int16, coordinator epoch int32 (-1 when a marker
    carries no value)."""
    view = memoryview(batch).cast("B")
    pos = BATCH_HEADER_SIZE
    try:
        pos = _skip_varint(view, pos)  # record length
        pos += 1  # attributes
        pos = _skip_varint(view, pos)  # timestamp delta
        pos = _skip_varint(view, pos)  # offset delta
        key_length, pos = _zigzag(view, pos)
        if key_length < 4:
            raise InvalidRecordBatch("bad_record", "control record key shorter than 4 bytes")
        _, kind = struct.unpack_from(">hh", view, pos)
        pos += key_length
        value_length, pos = _zigzag(view, pos)
        coordinator_epoch = -1
        if value_length >= 6:
            _, coordinator_epoch = struct.unpack_from(">hi", view, pos)
    except (IndexError, struct.error):
        raise InvalidRecordBatch("bad_record", "control batch without a whole record") from None
    try:
        return ControlType(kind), coordinator_epoch
    except ValueError:
        raise InvalidRecordBatch("bad_record", f"unknown control record type {kind}") from None


def control_batch(
    producer_id: int,
    producer_epoch: int,
    kind: ControlType,
    coordinator_epoch: int,
    timestamp: int,
) -> bytes:
    """A marker batch as a transaction coordinator's WriteTxnMarkers has it written."""
    from data_plane.records.batch import Record, RecordBatch

    record = Record(
        offset=0,
        timestamp=timestamp,
        key=struct.pack(">hh", 0, int(kind)),
        value=struct.pack(">hi", 0, coordinator_epoch),
    )
    return RecordBatch(
        base_offset=0,
        records=(record,),
        is_transactional=True,
        is_control=True,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        max_timestamp=timestamp,
        base_timestamp=timestamp,
    ).encode()


def _skip_varint(view: memoryview, pos: int) -> int:
    while view[pos] & 0x80:
        pos += 1
    return pos + 1


def _zigzag(view: memoryview, pos: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        b = view[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


class TxnIndex:
    """One segment's aborted transactions, in marker order (append only, like Kafka's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # read on first use

    @classmethod
    def for_segment(cls, directory: Path, base_offset: int) -> TxnIndex:
        return cls(directory / f"{base_offset:020d}{TXN_INDEX_SUFFIX}")

    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = list(self._read())
        return self._entries

    def _read(self) -> Iterable[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE  # a torn last entry is left out
        for pos in range(0, whole, ENTRY_SIZE):
            _, producer_id, first, last, lso = _ENTRY.unpack_from(data, pos)
            yield AbortedTxn(producer_id, first, last, lso)

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction at {txn.last_offset} after one at {entries[-1].last_offset}"
            )
        packed = _ENTRY.pack(
            0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
        )
        with open(self.path, "ab") as f:
            f.write(packed)
        entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap ``[fetch_offset, upper_bound)``."""
        return [
            t
            for t in self.entries()
            if t.last_offset >= fetch_offset and t.first_offset < upper_bound
        ]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (the log was cut)."""
        entries = self.entries()
        kept = [t for t in entries if t.last_offset < offset]
        if len(kept) == len(entries):
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            for t in kept:
                f.write(
                    _ENTRY.pack(
                        0, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset
                    )
                )
        os.replace(tmp, self.path)
        self._entries = kept

    def flush(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
