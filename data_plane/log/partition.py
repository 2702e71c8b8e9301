"""One partition's log: an ordered list of segments in its own directory.

Directory layout (named by the caller, e.g. ``<topic uuid>-<partition>``)::

    00000000000000000000.log / .index / .timeindex   sealed segments
    00000000000000052341.log / .index / .timeindex   the active segment (appends go here)
    recovery-point         offset below which everything is known to be on disk
    log-start-offset       first offset still readable (retention / DeleteRecords)
    leader-epoch-checkpoint
    00000000000000052341.snapshot                    idempotent-producer state at that offset
    .clean-shutdown        present only between a clean close and the next open

Invariants (what survives a crash):

* Only whole, CRC-valid batches are ever visible. An append writes its bytes, then indexes
  them, then advances the log end offset; a reader never sees a partial batch.
* Segments roll when the active one would exceed ``segment.bytes``, is older than
  ``segment.ms``, or its index is full. A rolled segment is fsynced and its indexes trimmed,
  and the recovery point advances to the new segment's base offset; so after a crash only
  segments at or above the recovery point (normally just the active one) are scanned.
* Open after a clean close (marker present) reads no data: segments are listed and opened
  lazily. Open after a crash revalidates the unflushed tail batch by batch, cuts the first
  torn or corrupt batch and everything after it, and rebuilds those indexes.
* Flushing is left to the OS by default, as Kafka does: durability comes from replication
  (Step 5), and an fsync per append would cap throughput at the disk's sync rate. With
  ``flush_messages`` / ``flush_ms`` set, the log fsyncs after that many records or that long.

Thread safety: every public method takes the log's lock, so a broker thread and the
retention/compaction thread may share a log.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from data_plane.log.checkpoint import LeaderEpochCache, read_int, write_int
from data_plane.log.config import LogConfig
from data_plane.log.producer_state import ActiveProducer, ProducerStateManager
from data_plane.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    FileSlice,
    LogSegment,
)
from data_plane.log.transactions import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    ControlType,
    control_marker,
)
from data_plane.records.batch import (
    BATCH_HEADER_SIZE,
    CRC_START,
    BatchHeader,
    InvalidRecordBatch,
    RecordBatch,
    iter_batches,
    read_header,
    validate_batch,
)

CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINT = "recovery-point"
LOG_START_OFFSET = "log-start-offset"
LEADER_EPOCHS = "leader-epoch-checkpoint"
SNAPSHOT_SUFFIX = ".snapshot"
KEPT_SNAPSHOTS = 2
SWAP_SUFFIX = ".swap"

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class OffsetOutOfRange(Exception):
    def __init__(self, offset: int, log_start: int, log_end: int) -> None:
        super().__init__(f"offset {offset} is outside [{log_start}, {log_end}]")
        self.offset = offset


class LogIOError(Exception):
    """An append or roll failed on I/O; the log is unchanged and still readable."""


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    batches: int
    records: int
    duplicate: bool = False  # a producer retry: nothing was appended


@dataclass(frozen=True)
class TimestampLookup:
    offset: int
    timestamp: int
    leader_epoch: int = -1  # the batch's partition leader epoch (-1: none recorded)


_ATTR_TS_TYPE = 0x08
_ATTRS = struct.Struct(">h")
_TS = struct.Struct(">q")
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")


def _apply_log_append_time(
    head: bytearray, body: memoryview, header: BatchHeader, now_ms: int
) -> None:
    """Stamp a batch with the broker's time (timestamp type bit + max timestamp), re-CRC."""
    _ATTRS.pack_into(head, 21, header.attributes | _ATTR_TS_TYPE)
    _TS.pack_into(head, 35, now_ms)
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(head)[CRC_START:]))
    struct.pack_into(">I", head, 17, crc)


class PartitionLog:
    def __init__(self, directory: Path, config: LogConfig, clock: Clock) -> None:
        """Use :meth:`open`."""
        self.directory = directory
        self.config = config
        self.clock = clock
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        # Compaction has cleaned everything before this offset (in memory; see compaction).
        self.cleaner_offset = 0
        self.recovery_point = 0
        self.leader_epochs = LeaderEpochCache(directory / LEADER_EPOCHS)
        self.producers = ProducerStateManager()
        # Transactions ended here by a marker not yet below the high watermark: (first
        # offset, marker offset). They hold the last stable offset back until then.
        self._completed: list[tuple[int, int]] = []
        # False while no segment holds an aborted transaction: read_committed fetches
        # (librdkafka's default) then skip the index lookups.
        self._has_aborts = False
        # Whether a transactional batch or marker was appended or replayed since open: a
        # truncation then rebuilds the producer state by replay, else it just forgets.
        self._transactional = False
        self._lock = threading.RLock()
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self.pending_deletes: list[tuple[int, list[Path]]] = []
        self.recovered_bytes_cut = 0
        self.opened_cleanly = False
        self.closed = False

    # --- open / close -------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, clock: Clock = wall_clock_ms) -> PartitionLog:
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, clock)
        log._load()
        return log

    def _segment(self, base: int, created_ms: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.max_index_bytes,
            created_ms=created_ms,
        )

    def _load(self) -> None:
        self._remove_leftovers()
        marker = self.directory / CLEAN_SHUTDOWN
        self.opened_cleanly = marker.exists()
        bases = sorted(
            int(p.name[: -len(LOG_SUFFIX)]) for p in self.directory.glob("*" + LOG_SUFFIX)
        )
        now = self.clock()
        self.log_start_offset = read_int(self.directory / LOG_START_OFFSET, 0)
        self.recovery_point = read_int(self.directory / RECOVERY_POINT, 0)
        self.segments = [self._segment(b, now) for b in bases]
        if not self.opened_cleanly and self.segments:
            self._recover()
        if not self.segments:
            start = max(self.log_start_offset, self.recovery_point if self.opened_cleanly else 0)
            self.segments = [self._create_segment(start)]
        else:
            self.segments[-1].open_for_append()
        self._bases = [s.base_offset for s in self.segments]
        self.log_end_offset = self.segments[-1].next_offset
        self.log_start_offset = min(
            max(self.log_start_offset, self.segments[0].base_offset), self.log_end_offset
        )
        self.high_watermark = self.log_start_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._has_aborts = any(self.directory.glob("*" + TXN_INDEX_SUFFIX))
        self._restore_producers()
        marker.unlink(missing_ok=True)  # from now on, a crash is detectable

    # --- producer-state snapshots -------------------------------------------------------

    def _snapshots(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            with contextlib.suppress(ValueError):
                found.append((int(path.name[: -len(SNAPSHOT_SUFFIX)]), path))
        return sorted(found)

    def _restore_producers(self) -> None:
        """Newest usable snapshot not past the log end, then the batches after it.

        Without one (a log from before snapshots, or all of them unreadable) the active
        segment is replayed, which holds every batch since the last roll.
        """
        start = self.segments[-1].base_offset
        self.producers = ProducerStateManager()
        for offset, path in reversed(self._snapshots()):
            if offset > self.log_end_offset:
                path.unlink(missing_ok=True)  # the log was cut below it
                continue
            try:
                self.producers = ProducerStateManager.from_json(path.read_bytes())
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            start = offset
            break
        start = max(start, self.segments[0].base_offset)
        self._completed = []
        for segment in self.segments[self._segment_index_for(start) :]:
            # Aborted transactions ending from here on are found again by the replay.
            segment.txn_index.truncate_to(start)
            found = segment.find(start)
            if found is None:
                continue
            for position, h in segment.headers_from(found[0]):
                if h.base_offset < start or h.producer_id < 0:
                    continue
                marker = None
                if h.is_control:
                    marker = control_marker(segment.read_batch(position, h))
                self._track_producer(h, marker, segment)

    def _write_producer_snapshot(self, *, sync: bool) -> None:
        """The producer state as of the log end, kept with the previous one (Kafka's way).

        A snapshot lost or torn by a crash is skipped on open (an older one, or the active
        segment, is replayed instead), so only the one written at a roll is fsynced.
        """
        path = self.directory / f"{self.log_end_offset:020d}{SNAPSHOT_SUFFIX}"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(self.producers.to_json())
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        for _, old in self._snapshots()[:-KEPT_SNAPSHOTS]:
            old.unlink(missing_ok=True)

    def _drop_snapshots_after(self, offset: int) -> None:
        for snap_offset, path in self._snapshots():
            if snap_offset > offset:
                path.unlink(missing_ok=True)

    def _remove_leftovers(self) -> None:
        """Finish or discard work a crash interrupted: deletes, cleaning, swaps."""
        for path in self.directory.iterdir():
            if path.name.endswith(DELETED_SUFFIX) or path.name.endswith(CLEANED_SUFFIX):
                path.unlink(missing_ok=True)
            elif path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)
        for swap in sorted(self.directory.glob("*" + LOG_SUFFIX + SWAP_SUFFIX)):
            self._complete_swap(swap)
        # Anything else half-built by compaction is discarded; the old segments stand.
        for stray in self.directory.glob("*" + SWAP_SUFFIX):
            stray.unlink()
        shutil.rmtree(self.directory / "cleaning", ignore_errors=True)

    def _complete_swap(self, swap_log: Path) -> None:
        """A compaction got as far as ``.swap``: replace the segments it covers, then rename."""
        base = int(swap_log.name.split(".")[0])
        end = int(swap_log.with_name(swap_log.name.replace(".log.swap", ".end.swap")).read_text())
        for path in self.directory.glob("*" + LOG_SUFFIX):
            seg_base = int(path.name[: -len(LOG_SUFFIX)])
            if base <= seg_base < end:
                for suffix in (LOG_SUFFIX, ".index", ".timeindex", TXN_INDEX_SUFFIX):
                    path.with_name(f"{seg_base:020d}{suffix}").unlink(missing_ok=True)
        for suffix in (".index", ".timeindex", TXN_INDEX_SUFFIX, LOG_SUFFIX):
            src = self.directory / f"{base:020d}{suffix}{SWAP_SUFFIX}"
            if src.exists():
                src.rename(self.directory / f"{base:020d}{suffix}")
        swap_log.with_name(swap_log.name.replace(".log.swap", ".end.swap")).unlink(missing_ok=True)

    def _recover(self) -> None:
        """Revalidate segments at or above the recovery point; cut at the first bad byte."""
        first = 0
        for i in range(len(self.segments)):
            nxt = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else None
            if nxt is None or nxt > self.recovery_point:
                first = i
                break
        for i in range(first, len(self.segments)):
            segment = self.segments[i]
            cut = segment.recover(self._reassign_epoch)
            self.recovered_bytes_cut += cut
            if i + 1 < len(self.segments):
                segment.seal()
            if cut:
                for later in self.segments[i + 1 :]:
                    later.rename_for_deletion()
                    for suffix in (LOG_SUFFIX, ".index", ".timeindex", TXN_INDEX_SUFFIX):
                        path = later.directory / f"{later.base_offset:020d}{suffix}{DELETED_SUFFIX}"
                        path.unlink(missing_ok=True)
                del self.segments[i + 1 :]
                break

    def _reassign_epoch(self, header: BatchHeader) -> None:
        """Recovery: the epoch of a batch that was not flushed may not be in the epoch
        file yet (it is written with the log's flush), so it is taken from the batch."""
        if header.partition_leader_epoch >= 0:
            self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)

    def close(self) -> None:
        """Flush, seal the indexes and leave the clean-shutdown marker."""
        with self._lock:
            if self.closed:
                return
            self.flush()
            self._write_producer_snapshot(sync=False)
            for segment in self.segments:
                segment.close_files()
            self.purge_deleted(force=True)
            (self.directory / CLEAN_SHUTDOWN).touch()
            self.closed = True

    # --- appending ----------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        leader_epoch: int | None = None,
        assign_offsets: bool = True,
        markers: bool = False,
    ) -> AppendInfo:
        """Append one or more batches atomically: all are validated before any is written.

        ``assign_offsets`` (producers): offsets are rewritten from the log end offset, and
        batches must be contiguous (record count = last offset delta + 1). Without it
        (replication, Step 5) the batches keep their offsets, which must start at the log
        end offset. Control batches (transaction markers) come from a transaction
        coordinator (``markers``) or a leader's log (replication), never from a producer
        (``control_batch``, as Kafka's "clients are not allowed to write control records").
        Raises :class:`InvalidRecordBatch` (log untouched) or :class:`LogIOError` (log
        untouched, still readable).
        """
        with self._lock:
            view = memoryview(data).cast("B")
            if assign_offsets and (
                self.config.compression is not None or self.config.checks_timestamps
            ):
                view = memoryview(self._apply_topic_rules(view)).cast("B")
            headers = self._validate_all(view, assign_offsets, markers)
            found: list[tuple[ControlType, int] | None] = []
            pos = 0
            for header in headers:
                marker = None
                if header.is_control:
                    marker = control_marker(view[pos : pos + header.size])
                    if assign_offsets:  # a coordinator's marker, at the leader
                        self.producers.check_marker(
                            header.producer_id, header.producer_epoch, marker[1]
                        )
                found.append(marker)
                pos += header.size
            first = headers[0]
            if assign_offsets and first.producer_id >= 0 and first.base_sequence >= 0:
                duplicate = self.producers.check(
                    first.producer_id,
                    first.producer_epoch,
                    first.base_sequence,
                    first.last_offset_delta,
                )
                if duplicate is not None:
                    # A retry of a batch already in the log: acknowledge the original.
                    return AppendInfo(
                        duplicate.first_offset,
                        duplicate.first_offset + first.last_offset_delta,
                        first.max_timestamp,
                        -1,
                        0,
                        0,
                        duplicate=True,
                    )
            now = self.clock()
            append_time = now if self.config.log_append_time else -1
            next_offset = self.log_end_offset
            # Zero-copy: each batch is written as its patched 61-byte header followed by a
            # view of the producer's remaining bytes (os.pwritev), never copied whole.
            iov: list[bytes | bytearray | memoryview] = []
            pos = 0
            for i, header in enumerate(headers):
                head = bytearray(view[pos : pos + BATCH_HEADER_SIZE])
                body = view[pos + BATCH_HEADER_SIZE : pos + header.size]
                if assign_offsets:
                    _OFFSET.pack_into(head, 0, next_offset)
                    if leader_epoch is not None:
                        _EPOCH.pack_into(head, 12, leader_epoch)
                elif header.base_offset != next_offset:
                    raise InvalidRecordBatch(
                        "bad_offset",
                        f"batch starts at {header.base_offset}, log ends at {next_offset}",
                    )
                if append_time >= 0:
                    _apply_log_append_time(head, body, header, append_time)
                headers[i] = read_header(head)
                iov += (head, body)
                next_offset = headers[i].next_offset
                pos += header.size
            self._maybe_roll(pos, now)
            try:
                self.segments[-1].append(iov, pos, headers)
            except OSError as exc:
                raise LogIOError(f"append to {self.directory.name} failed: {exc}") from exc
            first_offset = headers[0].base_offset
            epoch = headers[0].partition_leader_epoch
            if epoch >= 0:
                self.leader_epochs.assign(epoch, first_offset)
            for h, marker in zip(headers, found, strict=True):
                if h.producer_id >= 0:
                    self._track_producer(h, marker, self.segments[-1])
            self.log_end_offset = next_offset
            records = sum(h.records_count for h in headers)
            self._unflushed_records += records
            self._maybe_flush(now)
            return AppendInfo(
                first_offset=first_offset,
                last_offset=next_offset - 1,
                max_timestamp=max(h.max_timestamp for h in headers),
                log_append_time=append_time,
                batches=len(headers),
                records=records,
            )

    def _track_producer(
        self, h: BatchHeader, marker: tuple[ControlType, int] | None, segment: LogSegment
    ) -> None:
        """Producer state after batch ``h`` (appended to or replayed from ``segment``): its
        sequence, and for transactions (Step 13) where one starts and where it ends; an
        aborted one is added to the segment's aborted-transaction index."""
        if h.is_transactional:
            self._transactional = True
        if marker is None:
            if h.base_sequence >= 0:
                self.producers.record(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.last_offset_delta,
                    h.base_offset,
                    h.max_timestamp,
                    transactional=h.is_transactional,
                )
            return
        kind, coordinator_epoch = marker
        first = self.producers.end_transaction(h.producer_id, h.producer_epoch, coordinator_epoch)
        if first is None:
            return  # a marker for a partition the transaction wrote nothing to
        self._completed.append((first, h.base_offset))
        if kind is ControlType.ABORT:
            ongoing = self.producers.first_unstable_offset()
            lso = ongoing if ongoing is not None else h.base_offset + 1
            segment.txn_index.append(AbortedTxn(h.producer_id, first, h.base_offset, lso))
            self._has_aborts = True

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the high watermark, or the first offset of the oldest transaction
        not yet decided there (still open, or ended by a marker not yet below the high
        watermark), whichever is lower. ``read_committed`` reads stop here."""
        lso = self.high_watermark
        first = self.producers.first_unstable_offset()
        if first is not None:
            lso = min(lso, first)
        for txn_first, marker in self._completed:
            if marker >= self.high_watermark:
                lso = min(lso, txn_first)
        # A transaction whose start retention (or DeleteRecords) removed holds readers at
        # the log start, not below it (as Kafka bounds its first unstable offset).
        return max(lso, min(self.log_start_offset, self.high_watermark))

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)``, by marker
        offset: what a ``read_committed`` fetch returns with its records. Only segments from
        the one holding ``fetch_offset`` are read: an abort marker is indexed in the segment
        it is in, at or after the offsets it covers."""
        if not self._has_aborts:
            return []
        with self._lock:
            found: list[AbortedTxn] = []
            start = self._segment_index_for(max(fetch_offset, self.segments[0].base_offset))
            for segment in self.segments[start:]:
                if segment.base_offset >= upper_bound and found:
                    break
                found += segment.txn_index.collect(fetch_offset, upper_bound)
            return found

    def _validate_all(
        self, view: memoryview, assign_offsets: bool, markers: bool = False
    ) -> list[BatchHeader]:
        headers: list[BatchHeader] = []
        pos = 0
        while pos < len(view):
            header = validate_batch(view, pos)
            if assign_offsets and header.is_control and not markers:
                raise InvalidRecordBatch("control_batch", "clients may not write control batches")
            if header.size > self.config.max_message_bytes:
                raise InvalidRecordBatch(
                    "too_large",
                    f"batch of {header.size} bytes exceeds max.message.bytes "
                    f"({self.config.max_message_bytes})",
                )
            if assign_offsets and header.records_count != header.last_offset_delta + 1:
                raise InvalidRecordBatch(
                    "bad_count",
                    f"{header.records_count} records but last offset delta "
                    f"{header.last_offset_delta}",
                )
            if assign_offsets and self.config.compact and not header.is_control:
                self._require_keys(view[pos : pos + header.size])
            headers.append(header)
            pos += header.size
        if not headers:
            raise InvalidRecordBatch("truncated", "no record batch in the data")
        return headers

    def _apply_topic_rules(self, view: memoryview) -> bytes | memoryview:
        """Producer batches under a topic's compression.type and timestamp bounds: a batch
        with a record outside message.timestamp.before/after.max.ms is refused
        (``bad_timestamp``); one whose codec is not the topic's is recompressed, its
        producer id, sequence, timestamps and records unchanged (as Kafka's broker-side
        recompression). When nothing is recompressed the bytes are returned as they came."""
        now = self.clock()
        target = self.config.compression
        out: list[bytes | memoryview] = []
        changed = False
        pos = 0
        for header in iter_batches(view):
            raw = view[pos : pos + header.size]
            pos += header.size
            if header.is_control:
                out.append(raw)
                continue
            recompress = target is not None and header.compression != target
            if not (recompress or self.config.checks_timestamps):
                out.append(raw)
                continue
            batch = RecordBatch.decode(raw)
            if self.config.checks_timestamps:
                self._check_timestamps(batch, now)
            if recompress and target is not None:
                out.append(dataclasses.replace(batch, compression=target).encode())
                changed = True
            else:
                out.append(raw)
        return b"".join(out) if changed else view

    def _check_timestamps(self, batch: RecordBatch, now: int) -> None:
        earliest = now - self.config.timestamp_before_max_ms
        latest = now + self.config.timestamp_after_max_ms
        for index, record in enumerate(batch.records):
            if not earliest <= record.timestamp <= latest:
                side = "before" if record.timestamp < earliest else "after"
                raise InvalidRecordBatch(
                    "bad_timestamp",
                    f"record {index} has timestamp {record.timestamp}, too far {side} the "
                    f"broker's time {now} (message.timestamp.{side}.max.ms)",
                    record_index=index,
                )

    def _require_keys(self, batch: memoryview) -> None:
        """A compacted log keeps the latest record per key, so a record without a key has
        no meaning there: Kafka refuses the batch (INVALID_RECORD), and so do we. The
        batch is decoded (decompressed) for this, as Kafka's validator does."""
        for index, record in enumerate(RecordBatch.decode(batch).records):
            if record.key is None:
                raise InvalidRecordBatch(
                    "no_key",
                    f"compacted topic cannot accept a record without a key (record {index} "
                    "of its batch)",
                    record_index=index,
                )

    def append_may_block(self, incoming: int) -> bool:
        """Whether an append of ``incoming`` bytes could wait on the disk or on another
        thread: it would roll the segment (an fsync), the topic fsyncs on append
        (``flush.messages``/``flush.ms``), or the maintenance thread holds the log now.
        An event loop runs such appends on a worker thread; the rest are cheap writes."""
        if not self._lock.acquire(blocking=False):
            return True
        try:
            c = self.config
            if c.flush_messages is not None or c.flush_ms is not None:
                return True
            active = self.segments[-1]
            return active.size > 0 and (
                active.size + incoming > c.segment_bytes
                or self.clock() - active.created_ms >= c.segment_ms
                or active.index_full
            )
        finally:
            self._lock.release()

    def _maybe_roll(self, incoming: int, now: int) -> None:
        active = self.segments[-1]
        if active.size == 0:
            return
        if (
            active.size + incoming > self.config.segment_bytes
            or now - active.created_ms >= self.config.segment_ms
            or active.index_full
        ):
            self.roll(now)

    def roll(self, now: int | None = None) -> LogSegment:
        """Seal the active segment (fsync, trim indexes) and start one at the log end."""
        with self._lock:
            now = self.clock() if now is None else now
            active = self.segments[-1]
            if active.size == 0:
                return active
            try:
                active.seal()
                segment = self._create_segment(self.log_end_offset, now)
            except OSError as exc:
                active.open_for_append()
                raise LogIOError(f"roll of {self.directory.name} failed: {exc}") from exc
            self.segments.append(segment)
            self._bases.append(segment.base_offset)
            self.leader_epochs.flush()  # with the records below the new recovery point
            self.recovery_point = segment.base_offset
            write_int(self.directory / RECOVERY_POINT, self.recovery_point)
            self._write_producer_snapshot(sync=True)
            return segment

    def _create_segment(self, base: int, now: int | None = None) -> LogSegment:
        return LogSegment.create(
            self.directory,
            base,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.max_index_bytes,
            created_ms=self.clock() if now is None else now,
        )

    def _maybe_flush(self, now: int) -> None:
        c = self.config
        if (c.flush_messages is not None and self._unflushed_records >= c.flush_messages) or (
            c.flush_ms is not None and now - self._last_flush_ms >= c.flush_ms
        ):
            self.flush()

    def flush(self) -> None:
        """fsync the active segment and advance the recovery point to the log end."""
        with self._lock:
            self.segments[-1].flush()
            self.leader_epochs.flush()
            self._unflushed_records = 0
            self._last_flush_ms = self.clock()
            if self.recovery_point != self.log_end_offset:
                self.recovery_point = self.log_end_offset
                write_int(self.directory / RECOVERY_POINT, self.recovery_point)

    # --- reading ------------------------------------------------------------------------

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True
    ) -> FileSlice | None:
        """Whole batches from ``offset`` (see :meth:`LogSegment.read`); None at the end.

        ``max_offset`` bounds what is exposed, e.g. the high watermark for consumers.
        Raises :class:`OffsetOutOfRange` below the log start or beyond the log end.
        """
        with self._lock:
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
            limit = (
                self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
            )
            if offset >= limit:
                return None
            for segment in self.segments[self._segment_index_for(offset) :]:
                if segment.base_offset >= limit:
                    return None
                found = segment.read(offset, max_bytes, max_offset=limit, min_one=min_one)
                if found is not None and found.length:
                    return found
                offset = max(offset, segment.next_offset)
            return None

    def offset_for_timestamp(self, timestamp: int) -> TimestampLookup | None:
        """The first record with a timestamp >= ``timestamp`` (Kafka's ListOffsets)."""
        with self._lock:
            for segment in self.segments:
                if segment.max_timestamp < timestamp:
                    continue
                _, start_offset = segment.timeindex.lookup(timestamp)
                start_offset = max(start_offset, self.log_start_offset)
                found = segment.find(start_offset)
                if found is None:
                    continue
                for position, header in segment.headers_from(found[0]):
                    if header.max_timestamp < timestamp:
                        continue
                    batch = RecordBatch.decode(segment.read_batch(position, header))
                    for record in batch.records:
                        ts = (
                            header.max_timestamp if header.timestamp_type == 1 else record.timestamp
                        )
                        if ts >= timestamp and record.offset >= self.log_start_offset:
                            return TimestampLookup(record.offset, ts, header.partition_leader_epoch)
            return None

    def legacy_offsets_before(self, timestamp: int, max_num: int) -> list[int]:
        """ListOffsets v0 (Kafka's ``legacyFetchOffsetsBefore``): each segment's first offset
        paired with the time its file was last modified, and the log end paired with now;
        from the last pair at or before ``timestamp`` (-1: the log end, -2: the first
        segment), at most ``max_num`` offsets going back, newest first."""
        with self._lock:
            points = [
                (max(s.base_offset, self.log_start_offset), s.last_modified_ms())
                for s in self.segments
            ]
            if self.segments[-1].size > 0:
                points.append((self.log_end_offset, self.clock()))
            if timestamp == -1:
                start = len(points) - 1
            elif timestamp == -2:
                start = 0
            else:
                start = len(points) - 1
                while start >= 0 and points[start][1] > timestamp:
                    start -= 1
            count = min(max_num, start + 1)
            return sorted((points[start - j][0] for j in range(count)), reverse=True)

    def max_timestamp_lookup(self) -> TimestampLookup | None:
        """The first record with the largest timestamp (Kafka's MAX_TIMESTAMP, KIP-734): in
        the segment whose largest timestamp is the largest (the first such), the first
        batch holding it, and in that batch the first record with it (with log append time,
        every record of the batch has it, so its first)."""
        with self._lock:
            best: LogSegment | None = None
            for segment in self.segments:
                if segment.max_timestamp >= 0 and (
                    best is None or segment.max_timestamp > best.max_timestamp
                ):
                    best = segment
            if best is None:
                return None
            target = best.max_timestamp
            _, start_offset = best.timeindex.lookup(target)
            found = best.find(start_offset)
            if found is None:
                return None
            for position, header in best.headers_from(found[0]):
                if header.max_timestamp != target:
                    continue
                if header.timestamp_type == 1:
                    return TimestampLookup(
                        header.base_offset, target, header.partition_leader_epoch
                    )
                for record in RecordBatch.decode(best.read_batch(position, header)).records:
                    if record.timestamp == target:
                        return TimestampLookup(record.offset, target, header.partition_leader_epoch)
            return None

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def active_producers(self) -> list[ActiveProducer]:
        """The idempotent producers this log remembers (DescribeProducers)."""
        with self._lock:
            return self.producers.active()

    # --- truncation and deletion ---------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after ``offset`` (followers diverging, Step 5).

        Truncation works on whole batches: a batch containing ``offset`` goes too.
        """
        with self._lock:
            if offset >= self.log_end_offset:
                return
            if offset <= self.segments[0].base_offset:
                self._truncate_fully_and_start_at(offset)
                return
            i = self._segment_index_for(offset)
            for later in self.segments[i + 1 :]:
                self._schedule_delete(later)
            del self.segments[i + 1 :]
            del self._bases[i + 1 :]
            active = self.segments[-1]
            if not active._writable:
                active.open_for_append()
            active.truncate_to(offset)
            self.log_end_offset = active.next_offset
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            write_int(self.directory / RECOVERY_POINT, self.recovery_point)
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            self._drop_snapshots_after(self.log_end_offset)
            if self._transactional or self.producers.first_unstable_offset() is not None:
                # Rebuilt from a snapshot before the cut: a transaction whose marker was
                # cut is open again, one that began after it is gone (as Kafka reloads it).
                self._restore_producers()
            else:  # no transactions here: only sequences to forget (no replay)
                self.producers.forget_from(self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and continue at ``offset`` (a follower behind the leader's
        log start)."""
        with self._lock:
            self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        for segment in self.segments:
            self._schedule_delete(segment)
        self.segments = [self._create_segment(offset)]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.producers = ProducerStateManager()
        self._completed = []
        self._drop_snapshots_after(-1)
        self.recovery_point = offset
        write_int(self.directory / RECOVERY_POINT, offset)
        write_int(self.directory / LOG_START_OFFSET, offset)
        self.leader_epochs.truncate_from_end(offset)

    def update_high_watermark(self, offset: int) -> int:
        with self._lock:
            self.high_watermark = max(self.log_start_offset, min(offset, self.log_end_offset))
            if self._completed:
                hw = self.high_watermark
                self._completed = [c for c in self._completed if c[1] >= hw]
            return self.high_watermark

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: make ``offset`` the log start (not beyond the high watermark).

        Whole segments below it are deleted; the rest of the partial segment stays on disk
        but is no longer readable. Returns the new log start offset.
        """
        with self._lock:
            if offset > self.high_watermark:
                raise OffsetOutOfRange(offset, self.log_start_offset, self.high_watermark)
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                write_int(self.directory / LOG_START_OFFSET, offset)
                self.leader_epochs.truncate_from_start(offset)
            self._delete_segments_below_log_start()
            return self.log_start_offset

    def _delete_segments_below_log_start(self) -> int:
        deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._schedule_delete(self.segments.pop(0))
            self._bases.pop(0)
            deleted += 1
        return deleted

    def delete_oldest_segments(self, predicate: Callable[[LogSegment], bool]) -> int:
        """Delete sealed segments from the oldest while ``predicate`` holds.

        Never deletes the active segment, nor a segment holding offsets at or above the
        high watermark. The log start offset moves to the first remaining segment.
        """
        with self._lock:
            deleted = 0
            while len(self.segments) > 1:
                oldest, following = self.segments[0], self.segments[1]
                if following.base_offset > self.high_watermark or not predicate(oldest):
                    break
                self._schedule_delete(self.segments.pop(0))
                self._bases.pop(0)
                deleted += 1
            if deleted:
                new_start = max(self.log_start_offset, self.segments[0].base_offset)
                if new_start != self.log_start_offset:
                    self.log_start_offset = new_start
                    write_int(self.directory / LOG_START_OFFSET, new_start)
                    self.leader_epochs.truncate_from_start(new_start)
            return deleted

    def _schedule_delete(self, segment: LogSegment) -> None:
        """Rename now (readers holding an fd keep working), remove in :meth:`purge_deleted`."""
        self.pending_deletes.append((self.clock(), segment.rename_for_deletion()))

    def purge_deleted(self, *, delay_ms: int = 60_000, force: bool = False) -> int:
        """Remove renamed files older than ``delay_ms``; returns how many were removed."""
        with self._lock:
            now = self.clock()
            keep, removed = [], 0
            for when, paths in self.pending_deletes:
                if force or now - when >= delay_ms:
                    for path in paths:
                        with contextlib.suppress(FileNotFoundError):
                            path.unlink()
                            removed += 1
                else:
                    keep.append((when, paths))
            self.pending_deletes = keep
            return removed

    def delete(self) -> None:
        """Remove the whole partition (topic deleted)."""
        with self._lock:
            for segment in self.segments:
                segment.close_files()
            self.closed = True
            shutil.rmtree(self.directory, ignore_errors=True)
