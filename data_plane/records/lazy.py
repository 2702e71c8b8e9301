"""A record batch whose records are decoded only when asked for.

:class:`LazyBatch` validates a batch (sizes, magic, CRC-32C) and decompresses its records
section once; nothing else is decoded until asked:

* which records lie in an offset range is arithmetic when the batch's offsets are
  contiguous (``records_count == last_offset_delta + 1``, every batch a producer writes);
  after compaction removed records the offset deltas are read, record by record;
* :meth:`LazyBatch.select` answers "which records of this range match a filter": a batch
  whose records section does not contain the filter's needles is answered without
  touching a record; otherwise only the records an occurrence of the needle falls in are
  checked, reading just the fields the filter needs, and only the matching ones are
  decoded (with :func:`~data_plane.records.batch.decode_record`, the code the full decode
  uses).

Record boundaries, once walked, are kept, so reading a large batch a window at a time
walks it once. Not thread-safe (a scan owns its batches).
"""

from __future__ import annotations

from bisect import bisect_right

from data_plane.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    Record,
    TimestampType,
    decode_record,
    validate_batch,
)
from data_plane.records.compression import CompressionError, decompress
from data_plane.records.filter import RecordFilter
from data_plane.records.varint import VarintError, read_varint, read_varint32

MAX_UNCOMPRESSED = 64 * 2**20


class LazyBatch:
    __slots__ = ("_maybe", "_offsets", "_starts", "body", "header")

    def __init__(self, header: BatchHeader, body: bytes) -> None:
        self.header = header
        self.body = body  # the records section, decompressed
        # Where each record's length varint starts (and, last, the end of the last
        # record walked): filled in as far as needed.
        self._starts: list[int] = [0]
        # Absolute offsets, walked only for a batch whose offsets have gaps.
        self._offsets: list[int] | None = None
        self._maybe: dict[RecordFilter, bool] = {}

    @classmethod
    def open(
        cls, buf: bytes | memoryview, pos: int = 0, *, max_uncompressed: int = MAX_UNCOMPRESSED
    ) -> LazyBatch:
        """Validate the batch at ``pos`` of ``buf`` and decompress its records section."""
        header = validate_batch(buf, pos)
        payload = bytes(memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size])
        try:
            body = decompress(header.compression, payload, max_size=max_uncompressed)
        except CompressionError as exc:
            raise InvalidRecordBatch("bad_compression", str(exc)) from None
        return cls(header, body)

    @property
    def count(self) -> int:
        return self.header.records_count

    @property
    def contiguous(self) -> bool:
        return self.header.records_count == self.header.last_offset_delta + 1

    # --- positions ---------------------------------------------------------------------

    def _walk(self, upto: int) -> None:
        """Find where records ``0..upto`` start (``upto`` may be ``count``: the end)."""
        starts = self._starts
        body = self.body
        end = len(body)
        pos = starts[-1]
        try:
            while len(starts) <= upto:
                first = body[pos] if pos < end else 0x80
                if first < 0x80:  # the usual one-byte length, read inline
                    length = (first >> 1) ^ -(first & 1)
                    pos += 1
                else:
                    length, pos = read_varint32(body, pos)
                if length < 6 or pos + length > end:
                    raise InvalidRecordBatch("bad_record", "record length runs past the batch")
                pos += length
                starts.append(pos)
        except VarintError as exc:
            raise InvalidRecordBatch("bad_record", f"malformed record: {exc}") from None
        if len(starts) > self.count and starts[self.count] != end:
            raise InvalidRecordBatch("bad_count", "bytes remain after the last counted record")

    def _start(self, index: int) -> int:
        if index >= len(self._starts):
            self._walk(index)
        return self._starts[index]

    def offsets(self) -> list[int]:
        """The absolute offset of every record."""
        if self.contiguous:
            return list(range(self.header.base_offset, self.header.last_offset + 1))
        if self._offsets is None:
            self._walk(self.count)
            out = []
            base = self.header.base_offset
            body = self.body
            try:
                for start in self._starts[: self.count]:
                    _, p = read_varint32(body, start)
                    _, p = read_varint(body, p + 1)  # attributes, timestamp delta
                    delta, _ = read_varint32(body, p)
                    out.append(base + delta)
            except VarintError as exc:
                raise InvalidRecordBatch("bad_record", f"malformed record: {exc}") from None
            self._offsets = out
        return self._offsets

    def offset(self, index: int) -> int:
        if self.contiguous:
            return self.header.base_offset + index
        return self.offsets()[index]

    def index_range(self, lo: int, hi: int) -> tuple[int, int]:
        """Indexes [i, j) of the records whose offsets lie in [lo, hi)."""
        if self.contiguous:
            base = self.header.base_offset
            n = self.count
            return min(max(lo - base, 0), n), min(max(hi - base, 0), n)
        offsets = self.offsets()
        i = 0
        while i < len(offsets) and offsets[i] < lo:
            i += 1
        j = i
        while j < len(offsets) and offsets[j] < hi:
            j += 1
        return i, j

    # --- records -----------------------------------------------------------------------

    def record(self, index: int) -> Record:
        return decode_record(self.body, self._start(index), self.header)[0]

    def timestamp(self, record: Record) -> int:
        """The record's timestamp as readers see it (the batch's for LogAppendTime)."""
        if self.header.timestamp_type is TimestampType.LOG_APPEND_TIME:
            return self.header.max_timestamp
        return record.timestamp

    def _fields_match(self, index: int, flt: RecordFilter) -> bool:
        """``flt`` against record ``index``, reading only the fields it needs (the key for
        a key filter, then the value, then the headers) and building no objects; the same
        answer as :meth:`RecordFilter.matches` on the decoded record."""
        body = self.body
        end = self._start(index + 1)
        try:
            _, p = read_varint32(body, self._start(index))
            _, p = read_varint(body, p + 1)  # attributes, timestamp delta
            _, p = read_varint32(body, p)  # offset delta
            key, p = _field(body, p, end)
            if flt.key and flt.key not in (key or b""):
                return False
            if not flt.text:
                return True
            value, p = _field(body, p, end)
            if flt.text in (value or b""):
                return True
            count, p = read_varint32(body, p)
            for _ in range(count):
                name, p = _field(body, p, end)
                data, p = _field(body, p, end)
                if flt.text in (name or b"") or flt.text in (data or b""):
                    return True
        except VarintError as exc:
            raise InvalidRecordBatch("bad_record", f"malformed record: {exc}") from None
        return False

    def may_match(self, flt: RecordFilter) -> bool:
        """False when no record of the batch can match ``flt`` (asked of the bytes once)."""
        maybe = self._maybe.get(flt)
        if maybe is None:
            maybe = self._maybe[flt] = flt.may_match(self.body)
        return maybe

    def select(
        self, lo: int, hi: int, limit: int, flt: RecordFilter
    ) -> tuple[int, int, list[Record]]:
        """Read up to ``limit`` records with offsets in [lo, hi): (how many were read, the
        offset of the last one read or -1, the ones ``flt`` matches in offset order)."""
        i, j = self.index_range(lo, hi)
        j = min(j, i + max(limit, 0))
        if i >= j:
            return 0, -1, []
        last = self.offset(j - 1)
        if not flt:
            return j - i, last, [self.record(k) for k in range(i, j)]
        if not self.may_match(flt):
            return j - i, last, []
        needle = flt.needles[0]
        start, end = self._start(i), self._start(j)
        body, starts = self.body, self._starts
        found: list[Record] = []
        while True:
            at = body.find(needle, start, end)
            if at < 0:
                break
            k = bisect_right(starts, at) - 1
            if self._fields_match(k, flt):
                found.append(self.record(k))
            # Every later occurrence that starts in a later record is still found.
            start = self._start(k + 1)
        return j - i, last, found


def _field(body: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    """A length-prefixed field of a record (None: length -1), within the record's ``end``."""
    length, pos = read_varint32(body, pos)
    if length == -1:
        return None, pos
    if length < -1 or pos + length > end:
        raise InvalidRecordBatch("bad_record", "record field length runs past the record")
    return body[pos : pos + length], pos + length
