"""Log compaction (cleanup.policy=compact): keep the latest record per key.

A pass works on the sealed segments below the high watermark (the active segment is never
cleaned). It builds a map from key digest to the latest offset of that key, bounded by
``max_keys`` (when full, the pass cleans only the segments the map covers), then rewrites
those segments in groups that fit ``segment.bytes``:

* a record survives if it has no key, or is the latest for its key anywhere in the map;
* a tombstone (null value) that is the latest for its key survives until its timestamp
  is older than ``delete.retention.ms``, so consumers have time to see the delete;
* offsets never change: a batch keeps its base offset and last offset delta and is
  rewritten only if it lost records (otherwise its bytes are copied as they are); a batch
  that lost every record is dropped; control batches are kept;
* transactions (Step 13): only segments below the last stable offset are cleaned; the
  records of aborted transactions are removed and never count as a key's latest value;
  commit and abort markers are kept, and so are the aborted-transaction index entries
  of the segments rewritten (copied into the cleaned segment's ``.txnindex``).

Crash safety: cleaned files are built in ``cleaning/``, moved in with a ``.swap`` suffix
(the log file last, with ``<base>.end.swap`` naming the first offset after the group),
and only then do the old segments give way. :meth:`PartitionLog.open` completes a swap
found on disk and discards anything else half-built, so a crash at any point leaves
either the old segments or the cleaned ones, never a mix.

Appends continue during a pass: the lock is held only to snapshot the segment list and to
swap, and the swap checks that the segments it replaces are still the log's.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data_plane.log.partition import SWAP_SUFFIX, PartitionLog
from data_plane.log.segment import LOG_SUFFIX, LogSegment, segment_name
from data_plane.log.transactions import TXN_INDEX_SUFFIX, AbortedTxn
from data_plane.records.batch import BatchHeader, RecordBatch, read_header

CLEANING_DIR = "cleaning"


@dataclass(frozen=True)
class CompactionResult:
    segments_cleaned: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def _digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


class _Throttle:
    """Keeps a pass under ``bytes_per_second`` of reads plus writes (bounded I/O)."""

    def __init__(self, bytes_per_second: int | None, sleep: Callable[[float], None]) -> None:
        self.rate = bytes_per_second
        self.sleep = sleep
        self.started = time.monotonic()
        self.done = 0

    def __call__(self, nbytes: int) -> None:
        if not self.rate:
            return
        self.done += nbytes
        ahead = self.done / self.rate - (time.monotonic() - self.started)
        if ahead > 0:
            self.sleep(ahead)


def compact(
    log: PartitionLog,
    now_ms: int,
    *,
    max_keys: int = 1_000_000,
    io_bytes_per_second: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CompactionResult:
    throttle = _Throttle(io_bytes_per_second, sleep)
    with log._lock:
        # Below the last stable offset only (Kafka's first uncleanable offset): records of
        # a transaction not yet decided must neither be removed nor shadow older ones.
        stable = log.last_stable_offset
        sealed = [
            s for i, s in enumerate(log.segments[:-1]) if log.segments[i + 1].base_offset <= stable
        ]
    candidates = cleanable(log, sealed, now_ms)
    if not candidates:
        return CompactionResult(0, 0, 0, 0)
    aborted = _Aborted(log.aborted_transactions(candidates[0].base_offset, log.log_end_offset))
    latest, covered = _build_offset_map(candidates, max_keys, throttle, aborted)
    if not covered:
        return CompactionResult(0, 0, 0, 0)
    horizon = now_ms - log.config.delete_retention_ms
    cleaned_to = covered[-1].next_offset  # read now: cleaning replaces these segments
    removed = before = after = 0
    for group in _groups(covered, log.config.segment_bytes):
        r, b, a = _clean_group(log, group, latest, horizon, throttle, aborted)
        removed, before, after = removed + r, before + b, after + a
    log.cleaner_offset = max(log.cleaner_offset, cleaned_to)
    return CompactionResult(len(covered), removed, before, after)


def cleanable(log: PartitionLog, sealed: list[LogSegment], now_ms: int) -> list[LogSegment]:
    """The sealed segments this pass may clean, or none, as Kafka's cleaner decides:

    * ``min.compaction.lag.ms``: only the oldest segments whose newest record is at least
      that old (records younger than the lag keep every update);
    * ``min.cleanable.dirty.ratio``: only when that share of those segments' bytes has
      not been cleaned yet (what lies at or past ``log.cleaner_offset``, in memory: after
      a restart everything counts as dirty once);
    * ``max.compaction.lag.ms``: a dirty segment older than that is cleaned whatever the
      ratio says.
    """
    config = log.config
    if config.min_compaction_lag_ms > 0:
        cutoff = now_ms - config.min_compaction_lag_ms
        sealed = list(itertools.takewhile(lambda s: s.max_timestamp <= cutoff, sealed))
    total = sum(s.size for s in sealed)
    if total == 0:
        return []
    dirty = [s for s in sealed if s.base_offset >= log.cleaner_offset]
    overdue = any(now_ms - s.created_ms >= config.max_compaction_lag_ms for s in dirty)
    if sum(s.size for s in dirty) / total < config.min_cleanable_dirty_ratio and not overdue:
        return []
    return sealed


class _Aborted:
    """Which transactional batches belong to aborted transactions (from the log's
    aborted-transaction index): they are removed by cleaning and never shadow a key."""

    def __init__(self, entries: list[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for t in entries:
            self._by_producer.setdefault(t.producer_id, []).append((t.first_offset, t.last_offset))

    def __call__(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        spans = self._by_producer.get(header.producer_id, ())
        return any(first <= header.base_offset <= last for first, last in spans)


def _build_offset_map(
    segments: list[LogSegment], max_keys: int, throttle: _Throttle, aborted: _Aborted
) -> tuple[dict[bytes, int], list[LogSegment]]:
    latest: dict[bytes, int] = {}
    covered: list[LogSegment] = []
    for segment in segments:
        staged: dict[bytes, int] = {}
        for position, header in segment.headers_from(0):
            if header.is_control or aborted(header):
                continue
            raw = segment.read_batch(position, header)
            throttle(len(raw))
            for record in RecordBatch.decode(raw).records:
                if record.key is not None:
                    staged[_digest(record.key)] = record.offset
        if len(latest) + len(staged.keys() - latest.keys()) > max_keys and covered:
            break  # this segment does not fit in the map: clean the ones before it
        latest.update(staged)
        covered.append(segment)
    return latest, covered


def _groups(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    groups: list[list[LogSegment]] = []
    for segment in segments:
        if groups and sum(s.size for s in groups[-1]) + segment.size <= max_bytes:
            groups[-1].append(segment)
        else:
            groups.append([segment])
    return groups


def _keep(
    record_key: bytes | None,
    value: bytes | None,
    offset: int,
    timestamp: int,
    latest: dict[bytes, int],
    horizon: int,
) -> bool:
    if record_key is None:
        return True
    newest = latest.get(_digest(record_key), -1)
    if offset < newest:
        return False
    return not (value is None and timestamp < horizon)


def _clean_group(
    log: PartitionLog,
    group: list[LogSegment],
    latest: dict[bytes, int],
    horizon: int,
    throttle: _Throttle,
    aborted: _Aborted,
) -> tuple[int, int, int]:
    workdir = log.directory / CLEANING_DIR
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    base = group[0].base_offset
    end = _group_end(log, group)
    cleaned = LogSegment.create(
        workdir,
        base,
        index_interval_bytes=log.config.index_interval_bytes,
        max_index_bytes=log.config.max_index_bytes,
        created_ms=group[0].created_ms,
    )
    removed = 0
    before = sum(s.size for s in group)
    for segment in group:
        for position, header in segment.headers_from(0):
            if aborted(header):  # an aborted transaction's records: gone
                removed += header.records_count
                continue
            raw = segment.read_batch(position, header)
            throttle(len(raw))
            kept, dropped = _clean_batch(raw, header, latest, horizon)
            removed += dropped
            if kept is not None:
                cleaned.append([kept], len(kept), [read_header(kept)])
                throttle(len(kept))
        # The group's aborted transactions stay indexed: markers are kept, and an
        # aborted transaction may have records past the cleaned range.
        for entry in segment.txn_index.entries():
            cleaned.txn_index.append(entry)
    cleaned.seal()
    after = cleaned.size
    _swap(log, group, workdir, base, end)
    return removed, before, after


def _clean_batch(
    raw: bytes, header: BatchHeader, latest: dict[bytes, int], horizon: int
) -> tuple[bytes | None, int]:
    if header.is_control:
        return raw, 0
    batch = RecordBatch.decode(raw)
    kept = tuple(
        r
        for r in batch.records
        if _keep(
            r.key,
            r.value,
            r.offset,
            header.max_timestamp if header.timestamp_type == 1 else r.timestamp,
            latest,
            horizon,
        )
    )
    dropped = len(batch.records) - len(kept)
    if not kept:
        return None, dropped
    if not dropped:
        return raw, 0
    rebuilt = RecordBatch(
        base_offset=batch.base_offset,
        records=kept,
        partition_leader_epoch=batch.partition_leader_epoch,
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        is_transactional=batch.is_transactional,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        last_offset_delta=batch.last_offset_delta,
        max_timestamp=batch.max_timestamp,
        base_timestamp=batch.base_timestamp,
    )
    return rebuilt.encode(), dropped


def _group_end(log: PartitionLog, group: list[LogSegment]) -> int:
    i = log.segments.index(group[-1])
    return log.segments[i + 1].base_offset


def _swap(log: PartitionLog, group: list[LogSegment], workdir: Path, base: int, end: int) -> None:
    name = segment_name(base)
    with log._lock:
        if any(s not in log.segments for s in group):
            shutil.rmtree(workdir, ignore_errors=True)  # truncated meanwhile: drop the work
            return
        suffixes = [".index", ".timeindex"]
        if (workdir / f"{name}{TXN_INDEX_SUFFIX}").exists():
            suffixes.append(TXN_INDEX_SUFFIX)
        for suffix in suffixes:
            (workdir / f"{name}{suffix}").rename(log.directory / f"{name}{suffix}{SWAP_SUFFIX}")
        (log.directory / f"{name}.end{SWAP_SUFFIX}").write_text(str(end))
        (workdir / f"{name}{LOG_SUFFIX}").rename(log.directory / f"{name}{LOG_SUFFIX}{SWAP_SUFFIX}")
        first = log.segments.index(group[0])
        for segment in group:
            log._schedule_delete(segment)
        for suffix in (*suffixes, LOG_SUFFIX):
            (log.directory / f"{name}{suffix}{SWAP_SUFFIX}").rename(
                log.directory / f"{name}{suffix}"
            )
        (log.directory / f"{name}.end{SWAP_SUFFIX}").unlink()
        replacement = LogSegment(
            log.directory,
            base,
            index_interval_bytes=log.config.index_interval_bytes,
            max_index_bytes=log.config.max_index_bytes,
            created_ms=group[0].created_ms,
        )
        log.segments[first : first + len(group)] = [replacement]
        log._bases[first : first + len(group)] = [base]
        shutil.rmtree(workdir, ignore_errors=True)
