"""The message browser's bounded scan (no Django: the benchmark runs it alone).

A scan reads at most ``Query.scan`` records (and for at most ``seconds``) of a topic's
partitions, however few match the filters, and says how many it read, where it stopped
and how to go on:

* ``newest`` reads backwards from the end of each partition, a window at a time;
* ``earliest``, ``offset`` and ``timestamp`` read forwards from that position.

Partitions take turns, one window each, so no partition hides the others.

Records are read from raw batches (:class:`PartitionReader`): each fetch's batches are
kept until the scan has read past them, a batch is decompressed once, and a filter is
first asked of the batch's bytes, so a batch holding no occurrence of the needle is
counted and skipped without decoding a record (:mod:`data_plane.records.lazy`). Only the
records a needle occurs in are decoded, and rows are rendered only for those shown.

Rows whose timestamps tie are interleaved across partitions (the first of each
partition, then the second of each...), so equal timestamps never show one partition
before all others.

Transactions (Step 13): by default a scan reads as a read_committed consumer does, up to
the last stable offset, leaving out the records of aborted transactions (counted, not
shown) and the commit and abort markers. With ``Query.transactions`` it reads everything up
to the high watermark and marks each row: an aborted transaction's record, a marker, or a
record past the last stable offset (not yet readable at read_committed).
"""

from __future__ import annotations

import struct
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

from data_plane.client import EARLIEST, LATEST, ClusterClient
from data_plane.log.transactions import AbortedSweep, ControlType
from data_plane.protocol.errors import ErrorCode
from data_plane.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    Record,
    TimestampType,
    read_header,
)
from data_plane.records.filter import RecordFilter
from data_plane.records.lazy import LazyBatch

DEFAULT_LIMIT, MAX_LIMIT = 50, 500
DEFAULT_SCAN, MAX_SCAN = 10_000, 200_000
SCAN_SECONDS = 5.0
WINDOW = 500  # records per partition per turn
# Bytes per fetch, shared out among the partitions scanned (each keeps two fetches' batches,
# so this bounds what a scan holds, bar batches larger than a fetch), within these bounds.
FETCH_BYTES, MIN_FETCH_BYTES, MAX_FETCH_BYTES = 8 << 20, 64 << 10, 1 << 20


@dataclass
class Query:
    partition: int | None = None  # None: every partition
    position: str = "newest"
    offset: int = 0
    timestamp_ms: int | None = None
    key: str = ""
    text: str = ""
    limit: int = DEFAULT_LIMIT
    scan: int = DEFAULT_SCAN
    fmt: str = "auto"
    transactions: bool = False  # show aborted records and markers, read past the LSO
    # Where a previous scan stopped, per partition (to go on from there).
    resume: dict[int, int] = field(default_factory=dict)

    @property
    def filtered(self) -> bool:
        return bool(self.key or self.text)

    @property
    def record_filter(self) -> RecordFilter:
        return RecordFilter.of(self.key, self.text)


@dataclass
class PartitionScan:
    partition: int
    start: int  # the log start offset
    end: int  # the high watermark (the last stable offset unless transactions are shown)
    scanned: int = 0
    next: int | None = None  # where to go on (None: nothing left in that direction)
    error: str | None = None


@dataclass(frozen=True)
class Row:
    """A matching record, not yet rendered."""

    partition: int
    record: Record
    timestamp: int  # as readers see it: the batch's for LogAppendTime
    log_append_time: bool
    # "" (a record a read_committed consumer reads), "aborted" (an aborted transaction's),
    # "unstable" (past the last stable offset), or a marker: "commit" or "abort".
    state: str = ""
    producer_id: int = -1  # a transactional record's or marker's producer

    @property
    def offset(self) -> int:
        return self.record.offset


@dataclass
class Scan:
    rows: list[Row]
    partitions: list[PartitionScan]
    scanned: int
    limited_by: str | None  # "matches", "scan", "time" or None (read everything asked)
    hidden_aborted: int = 0  # aborted transactions' records read and not shown
    hidden_markers: int = 0  # commit and abort markers passed and not shown

    @property
    def resume(self) -> str:
        return ",".join(f"{p.partition}:{p.next}" for p in self.partitions if p.next is not None)


class ReadFailed(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(ErrorCode(code).name)
        self.code = code


class _Fetched:
    """The whole batches of one fetch: (base offset, last offset, position) each, their
    headers, and which belong to aborted transactions (``aborted``: the Fetch's list)."""

    def __init__(
        self, data: bytes, aborted: tuple[tuple[int, int], ...] = (), stable: int = -1
    ) -> None:
        self.data = data
        self.stable = stable  # the last stable offset the leader reported
        self.batches: list[tuple[int, int, int]] = []
        self.headers: list[BatchHeader] = []
        self.aborted: list[bool] = []
        sweep = AbortedSweep(aborted)
        pos = 0
        while pos + BATCH_HEADER_SIZE <= len(data):
            header = read_header(data, pos)
            if header.size < BATCH_HEADER_SIZE or pos + header.size > len(data):
                break  # a batch cut off by the size limit
            self.batches.append((header.base_offset, header.last_offset, pos))
            self.headers.append(header)
            self.aborted.append(sweep.aborted(header))
            pos += header.size
        self.lasts = [b[1] for b in self.batches]  # to bisect
        self.opened: tuple[int, LazyBatch] | None = None  # the batch being read

    def covers(self, offset: int) -> bool:
        return bool(self.batches) and self.batches[0][0] <= offset <= self.batches[-1][1]

    def index_at(self, offset: int) -> int:
        """The batch holding ``offset`` or, after a gap, the first one after it."""
        return bisect_left(self.lasts, offset)

    def batch_at(self, offset: int) -> LazyBatch:
        index = self.index_at(offset)
        if self.opened is None or self.opened[0] != index:
            self.opened = (index, LazyBatch.open(self.data, self.batches[index][2]))
        return self.opened[1]

    @property
    def bytes_per_record(self) -> float:
        if not self.batches:
            return 0.0
        return len(self.data) / (self.batches[-1][1] - self.batches[0][0] + 1)


class PartitionReader:
    """Reads one partition by offset range, from the batches of its last two fetches.

    A fetch from offset ``o`` returns whole batches, the first holding ``o``; they answer
    every read inside them (so a large batch read a window at a time is fetched and
    decompressed once). Two fetches are kept because a read may straddle them (reading
    backwards, a window often starts in one batch and ends in the next). Reading
    backwards, a fetch starts far enough below the read (judged from the bytes per record
    seen so far) that it answers the next reads too.

    Fetches are at read_committed, which stops at the last stable offset and names the
    aborted transactions. Unless ``transactions`` is set, control batches (markers) are
    skipped and not counted, and aborted transactions' records are counted as read but
    not returned; with it, both are returned marked, and the log past the last stable
    offset is read at read_uncommitted. Not thread-safe.
    """

    def __init__(
        self,
        client: ClusterClient,
        topic: str,
        partition: int,
        fetch_bytes: int,
        *,
        backwards_from: int | None = None,
        transactions: bool = False,
    ) -> None:
        self.client = client
        self.tp = (topic, partition)
        self.fetch_bytes = fetch_bytes
        self.floor = backwards_from  # the log start, when reading backwards
        self.transactions = transactions
        self._kept: list[_Fetched] = []  # the newest last
        self.fetches = 0
        self.hidden_aborted = 0
        self._markers: set[int] = set()  # offsets of the markers passed (a read may repeat)

    def _fetch(self, offset: int) -> _Fetched:
        fetched = self._fetch_at(offset, read_committed=True)
        if self.transactions and not fetched.covers(offset):
            fetched = self._fetch_at(offset, read_committed=False)  # past the LSO
        return fetched

    def _fetch_at(self, offset: int, *, read_committed: bool) -> _Fetched:
        answer = self.client.fetch(
            self.tp, offset, max_bytes=self.fetch_bytes, read_committed=read_committed
        )
        self.fetches += 1
        if answer.error != ErrorCode.NONE:
            raise ReadFailed(answer.error)
        fetched = _Fetched(answer.records, answer.aborted, answer.last_stable_offset)
        self._kept = [*self._kept[-1:], fetched]
        return fetched

    def _holding(self, offset: int, hi: int) -> _Fetched | None:
        for fetched in reversed(self._kept):
            if fetched.covers(offset):
                return fetched
        if self.floor is not None and self._kept and self._kept[-1].bytes_per_record:
            below = int(self.fetch_bytes * 0.9 / self._kept[-1].bytes_per_record)
            fetched = self._fetch(min(offset, max(self.floor, hi - below)))
            if fetched.covers(offset):
                return fetched
        fetched = self._fetch(offset)
        return fetched if fetched.covers(offset) else None

    def read(self, lo: int, hi: int, limit: int, flt: RecordFilter) -> tuple[int, int, list[Row]]:
        """Up to ``limit`` records with offsets in [lo, hi): (how many were read, the
        offset of the last one read or -1, the matching rows)."""
        count, last, rows = 0, -1, []
        pos = lo
        while count < limit and pos < hi:
            fetched = self._holding(pos, hi)
            if fetched is None:
                break  # nothing at or after pos (the end of the log)
            index = fetched.index_at(pos)
            header, aborted = fetched.headers[index], fetched.aborted[index]
            if not self.transactions and header.is_control:
                self._markers.add(header.base_offset)
                pos = header.next_offset
                continue
            if not self.transactions and aborted:
                # Counted as read (the scan stays bounded), neither decoded nor shown.
                first = max(pos, header.base_offset)
                n = min(limit - count, min(hi, header.next_offset) - first)
                if n > 0:
                    count, last = count + n, first + n - 1
                    self.hidden_aborted += n
                pos = first + n if n > 0 and count >= limit else header.next_offset
                continue
            n, at, found = fetched.batch_at(pos).select(pos, hi, limit - count, flt)
            if n:
                count, last = count + n, at
            rows += [self._row(r, header, aborted, fetched.stable) for r in found]
            pos = at + 1 if n and count >= limit else header.next_offset
        return count, last, rows

    @property
    def hidden_markers(self) -> int:
        return len(self._markers)

    def _row(self, record: Record, header: BatchHeader, aborted: bool, stable: int) -> Row:
        log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
        state = ""
        if header.is_control:
            kind = struct.unpack(">hh", record.key)[1] if len(record.key or b"") >= 4 else -1
            state = "commit" if kind == ControlType.COMMIT else "abort"
        elif aborted:
            state = "aborted"
        elif 0 <= stable <= record.offset:
            state = "unstable"
        return Row(
            self.tp[1],
            record,
            header.max_timestamp if log_append else record.timestamp,
            log_append,
            state,
            header.producer_id if header.is_transactional else -1,
        )


def _starts(
    client: ClusterClient, topic: str, q: Query, partitions: list[int], explain: Explain
) -> dict[int, PartitionScan]:
    tps = [(topic, p) for p in partitions]
    first = client.list_offsets(dict.fromkeys(tps, EARLIEST))
    # Where a read_committed consumer stops (the last stable offset), unless transactions
    # are shown: then the high watermark.
    last = client.list_offsets(dict.fromkeys(tps, LATEST), read_committed=not q.transactions)
    found = {}
    if q.position == "timestamp" and not q.resume:
        assert q.timestamp_ms is not None
        found = client.list_offsets(dict.fromkeys(tps, q.timestamp_ms))
    out = {}
    for tp in tps:
        error = first[tp].error or last[tp].error or (found[tp].error if found else 0)
        p = PartitionScan(tp[1], first[tp].offset, last[tp].offset)
        if error:
            p.error = explain(error, tp[1])
        elif tp[1] in q.resume:
            p.next = q.resume[tp[1]]
        elif q.resume:
            p.next = None  # this partition had nothing left when the scan stopped
        elif q.position == "newest":
            p.next = p.end
        elif q.position == "earliest":
            p.next = p.start
        elif q.position == "offset":
            p.next = min(max(q.offset, p.start), p.end)
        else:
            p.next = found[tp].offset if found[tp].offset >= 0 else p.end
        backwards = q.position == "newest"
        if p.next is not None and (p.next <= p.start if backwards else p.next >= p.end):
            p.next = None  # nothing to read in that direction
        out[tp[1]] = p
    return out


Explain = Callable[[int, int], str]


def _explain(code: int, partition: int) -> str:
    return ErrorCode(code).name.lower()


def scan(
    client: ClusterClient,
    topic: str,
    q: Query,
    partitions: list[int],
    *,
    seconds: float = SCAN_SECONDS,
    explain: Explain = _explain,
) -> Scan:
    """Read at most ``q.scan`` records of ``partitions`` and keep up to ``q.limit`` matches.

    ``explain(error code, partition)`` words a partition's read error.
    """
    deadline = time.monotonic() + seconds
    states = _starts(client, topic, q, partitions, explain)
    backwards = q.position == "newest"
    flt = q.record_filter
    live = [p for p in states.values() if p.error is None and p.next is not None]
    fetch_bytes = min(MAX_FETCH_BYTES, max(MIN_FETCH_BYTES, FETCH_BYTES // max(1, len(live))))
    readers = {
        p.partition: PartitionReader(
            client,
            topic,
            p.partition,
            fetch_bytes,
            backwards_from=p.start if backwards else None,
            transactions=q.transactions,
        )
        for p in live
    }
    budget = q.scan
    matched: list[Row] = []
    limited_by = None
    while live:
        if budget <= 0:
            limited_by = "scan"
            break
        if time.monotonic() > deadline:
            limited_by = "time"
            break
        if len(matched) >= q.limit and not backwards:
            limited_by = "matches"
            break
        share = min(WINDOW, -(-budget // len(live)))  # the budget shared out fairly
        for p in list(live):
            assert p.next is not None
            window = min(share, budget)
            if window <= 0:
                break
            lo, hi = (max(p.start, p.next - window), p.next) if backwards else (p.next, p.end)
            try:
                count, last, rows = readers[p.partition].read(lo, hi, window, flt)
            except ReadFailed as exc:
                p.error = explain(exc.code, p.partition)
                count, last, rows = 0, -1, []
            except InvalidRecordBatch as exc:
                p.error = f"a record batch at or after offset {lo} is corrupt: {exc}"
                count, last, rows = 0, -1, []
            if backwards:
                p.next = lo if lo > p.start else None
            else:
                p.next = last + 1 if count and last + 1 < p.end else None
            if p.error or p.next is None:
                p.next = None if p.error else p.next
                live.remove(p)
            p.scanned += count
            budget -= count
            matched += rows
        if backwards and len(matched) >= q.limit:
            # Every live partition has read its window; the newest matches are in hand.
            limited_by = "matches"
            break
    matched = interleave(matched, newest_first=backwards)
    if len(matched) > q.limit:
        matched = matched[: q.limit]
        limited_by = "matches"
    ordered = sorted(states.values(), key=lambda p: p.partition)
    return Scan(
        matched,
        ordered,
        sum(p.scanned for p in ordered),
        limited_by,
        sum(r.hidden_aborted for r in readers.values()),
        sum(r.hidden_markers for r in readers.values()),
    )


def interleave(rows: list[Row], *, newest_first: bool) -> list[Row]:
    """``rows`` in time order (newest first or oldest first); rows of equal timestamp take
    turns by partition: each partition's first at that time, then each one's second..."""
    by_time: dict[tuple[int, int], list[Row]] = {}
    for row in rows:
        by_time.setdefault((row.partition, row.timestamp), []).append(row)
    keyed = []
    for group in by_time.values():
        group.sort(key=lambda r: r.offset, reverse=newest_first)
        keyed += [
            ((-r.timestamp if newest_first else r.timestamp, rank, r.partition), r)
            for rank, r in enumerate(group)
        ]
    keyed.sort(key=lambda item: item[0])
    return [row for _, row in keyed]
