"""One log segment: ``<base offset, 20 digits>.log`` plus its ``.index`` and ``.timeindex``,
and a ``.txnindex`` of aborted transactions once one ends in it (``transactions.py``).

The ``.log`` file is a sequence of complete RecordBatch v2 batches exactly as appended
(offsets already assigned); nothing else is in it. Indexes are sparse: an offset-index entry
every ``index_interval_bytes`` of log, a time-index entry when that point also raises the
segment's maximum timestamp (see :mod:`data_plane.log.index`).

Invariants:
* the log file holds whole batches only; a torn or corrupt tail (after a crash) is cut
  off by :meth:`recover`, which also rebuilds both indexes from the batches it keeps;
* appends write the bytes first and index them after, so an index never points past data;
* a segment is opened lazily: a closed (sealed) segment costs no file descriptors or
  mappings until it is read.

Not thread-safe: :class:`~data_plane.log.partition.PartitionLog` serialises access.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from data_plane.log.index import IndexFullError, OffsetIndex, TimeIndex
from data_plane.log.transactions import TXN_INDEX_SUFFIX, TxnIndex
from data_plane.records.batch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    read_header,
    validate_batch,
)

LOG_SUFFIX = ".log"
try:
    IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))  # buffers one pwritev may take
except (ValueError, OSError):
    IOV_MAX = 1024
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True)
class FileSlice:
    """Whole batches at ``[position, position + length)`` of ``path`` (for sendfile)."""

    path: Path
    position: int
    length: int
    first_offset: int
    next_offset: int = -1  # the offset after the last batch in the slice

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        if self.length == 0:
            return b""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, self.length, self.position)
        finally:
            os.close(fd)


POSITIONS_KEPT = 32  # per segment, in each of LogSegment's two position maps


def _remember(positions: dict[int, int], offset: int, position: int) -> None:
    """Map ``offset`` to ``position``, forgetting the oldest entry beyond the bound."""
    if positions.pop(offset, None) is None and len(positions) >= POSITIONS_KEPT:
        positions.pop(next(iter(positions), offset), None)  # the oldest
    positions[offset] = position  # (re-)inserted as the newest


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        self.created_ms = created_ms
        name = segment_name(base_offset)
        self.log_path = directory / (name + LOG_SUFFIX)
        self.index_path = directory / (name + INDEX_SUFFIX)
        self.timeindex_path = directory / (name + TIMEINDEX_SUFFIX)
        self.txn_index = TxnIndex(directory / (name + TXN_INDEX_SUFFIX))
        self.size = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._fd: int | None = None
        self._writable = False
        self._index: OffsetIndex | None = None
        self._timeindex: TimeIndex | None = None
        self._bytes_since_index = 0
        self._next_offset: int | None = None
        self._max_timestamp: int | None = None
        # Where reads will start next, so that a reader at the tail needs no index lookup
        # and no scan: the offsets that begin the last appended batches, and the offsets
        # where recent reads ended (a consumer's next fetch position), each -> the file
        # position of the first batch at or after it. Bounded; cleared when cut back.
        self._appended: dict[int, int] = {}
        self._read_ends: dict[int, int] = {}

    # --- opening ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
    ) -> LogSegment:
        segment = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_bytes=max_index_bytes,
            created_ms=created_ms,
        )
        segment.log_path.touch()
        segment.size = 0
        segment.open_for_append()
        segment._next_offset = base_offset
        segment._max_timestamp = -1
        return segment

    def open_for_append(self) -> None:
        """Make this the active segment: an appending fd and preallocated indexes."""
        self.close_files()
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._writable = True
        self._index = OffsetIndex(
            self.index_path, self.base_offset, max_bytes=self.max_index_bytes, writable=True
        )
        self._timeindex = TimeIndex(
            self.timeindex_path, self.base_offset, max_bytes=self.max_index_bytes, writable=True
        )

    def _ensure_open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDONLY)
        return self._fd

    @property
    def index(self) -> OffsetIndex:
        if self._index is None:
            self._index = OffsetIndex(
                self.index_path, self.base_offset, max_bytes=self.max_index_bytes, writable=False
            )
        return self._index

    @property
    def timeindex(self) -> TimeIndex:
        if self._timeindex is None:
            self._timeindex = TimeIndex(
                self.timeindex_path,
                self.base_offset,
                max_bytes=self.max_index_bytes,
                writable=False,
            )
        return self._timeindex

    @property
    def fd(self) -> int:
        """A descriptor for reading (e.g. ``os.sendfile``); valid until the segment closes."""
        return self._ensure_open()

    # --- appending ----------------------------------------------------------------------

    @property
    def index_full(self) -> bool:
        return self.index.is_full or self.timeindex.is_full

    def append(
        self,
        buffers: Sequence[bytes | bytearray | memoryview],
        length: int,
        headers: list[BatchHeader],
    ) -> None:
        """Write already-validated batches (offsets assigned) and index them.

        ``buffers`` are written back to back with ``pwritev``, at most ``IOV_MAX`` of them
        per call (a replica's catch-up fetch can hold thousands of batches). On an I/O
        error (e.g. a full disk) the file is cut back to its previous size so no partial
        batch remains, and the error is raised to the caller.
        """
        assert self._writable and self._fd is not None
        start = self.size
        try:
            written = 0
            for i in range(0, len(buffers), IOV_MAX):
                group = buffers[i : i + IOV_MAX]
                expected = (
                    sum(memoryview(b).nbytes for b in group) if len(buffers) > IOV_MAX else length
                )
                done = os.pwritev(self._fd, group, start + written)
                written += done
                if done != expected:
                    break
            if written != length:
                raise OSError(f"short write: {written} of {length} bytes")
        except OSError:
            try:
                os.ftruncate(self._fd, start)
            finally:
                self.size = start
            raise
        position = start
        for header in headers:
            self._index_batch(header, position)
            position += header.size
        self.size = position

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        assert self._index is not None and self._timeindex is not None
        if self._bytes_since_index >= self.index_interval_bytes or not self._index.entries:
            try:
                self._index.append(header.base_offset, position)
                self._timeindex.append(header.max_timestamp, header.last_offset)
            except IndexFullError:
                pass  # the partition log rolls before the next append
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self._next_offset = header.next_offset
        _remember(self._appended, header.base_offset, position)
        if self._max_timestamp is None or header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp

    # --- reading ------------------------------------------------------------------------

    def headers_from(
        self, position: int, *, validate: bool = False
    ) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` to the end of the file."""
        fd = self._ensure_open()
        size = self.size
        while position + BATCH_HEADER_SIZE <= size:
            if validate:
                header = read_header(os.pread(fd, BATCH_HEADER_SIZE, position))
                if header.size > size - position or header.batch_length < BATCH_HEADER_SIZE - 12:
                    raise InvalidRecordBatch("truncated", "batch runs past the end of the file")
                header = validate_batch(os.pread(fd, header.size, position))
            else:
                header = read_header(os.pread(fd, BATCH_HEADER_SIZE, position))
            yield position, header
            position += header.size

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset`` (with its position)."""
        position = self._appended.get(offset)
        if position is None:
            position = self._read_ends.get(offset)
            if position is None:
                _, position = self.index.lookup(offset)
        for pos, header in self.headers_from(position):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one: bool = True
    ) -> FileSlice | None:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``.

        Batches at or beyond ``max_offset`` (e.g. the high watermark) are left out. With
        ``min_one`` the first batch is returned even if it alone exceeds ``max_bytes``, so
        a consumer always makes progress, as in Kafka.
        """
        found = self.find(offset)
        if found is None:
            return None
        start, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return None
        end = start
        next_offset = first.base_offset
        pos, header, size, fd = start, first, self.size, self._ensure_open()
        while True:
            if max_offset is not None and header.last_offset >= max_offset:
                break
            if pos + header.size - start > max_bytes and not (min_one and pos == start):
                break
            end = pos = pos + header.size
            next_offset = header.next_offset
            if pos + BATCH_HEADER_SIZE > size:
                break
            header = read_header(os.pread(fd, BATCH_HEADER_SIZE, pos))
        _remember(self._read_ends, next_offset, end)
        return FileSlice(self.log_path, start, end - start, first.base_offset, next_offset)

    def last_modified_ms(self) -> int:
        """When the log file was last written (its mtime; creation time if it is gone)."""
        try:
            return self.log_path.stat().st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return self.created_ms

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return os.pread(self._ensure_open(), header.size, position)

    @property
    def next_offset(self) -> int:
        """The offset after this segment's last batch (base offset when empty)."""
        if self._next_offset is None:
            _, position = self.index.last_entry()
            next_offset = self.base_offset
            for _, header in self.headers_from(position):
                next_offset = header.next_offset
            self._next_offset = next_offset
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max-timestamp in the segment (-1 when empty)."""
        if self._max_timestamp is None:
            largest = self.timeindex.max_timestamp()
            _, position = self.index.last_entry()
            for _, header in self.headers_from(position):
                largest = max(largest, header.max_timestamp)
            self._max_timestamp = largest
        return self._max_timestamp

    # --- recovery and truncation ----------------------------------------------------------

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Validate every batch, rebuild both indexes, cut any invalid tail; ``on_batch``
        is called with each valid batch's header, in order.

        Returns how many bytes were cut. Leaves the segment open for append with fresh,
        preallocated indexes.
        """
        for path in (self.index_path, self.timeindex_path):
            path.unlink(missing_ok=True)
        self.open_for_append()
        self._bytes_since_index = 0
        self._next_offset = self.base_offset
        self._max_timestamp = -1
        self._appended.clear()
        self._read_ends.clear()
        self.size = os.fstat(self._ensure_open()).st_size
        valid_end = 0
        try:
            for position, header in self.headers_from(0, validate=True):
                self._index_batch(header, position)
                valid_end = position + header.size
                if on_batch is not None:
                    on_batch(header)
        except InvalidRecordBatch:
            pass
        cut = self.size - valid_end
        if cut:
            assert self._fd is not None
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        return cut

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed."""
        found = self.find(offset)
        if found is None:
            return 0
        position, _ = found
        removed = self.size - position
        if not self._writable:
            self.open_for_append()
        assert self._fd is not None and self._index is not None and self._timeindex is not None
        os.ftruncate(self._fd, position)
        self.size = position
        self._appended.clear()
        self._read_ends.clear()
        self._index.truncate_to_offset(offset)
        self._timeindex.truncate_to_offset(offset)
        self.txn_index.truncate_to(offset)
        self._next_offset = None
        self._max_timestamp = None
        self._bytes_since_index = self.index_interval_bytes
        return removed

    # --- lifecycle ----------------------------------------------------------------------

    def flush(self) -> None:
        if self._fd is not None and self._writable:
            os.fsync(self._fd)
        for index in (self._index, self._timeindex):
            if index is not None:
                index.flush()
        if self._writable:
            self.txn_index.flush()

    def seal(self) -> None:
        """Stop appending: flush, trim the indexes to their entries, drop write handles."""
        self.flush()
        for index in (self._index, self._timeindex):
            if index is not None:
                index.trim_and_close()
        self._index = self._timeindex = None
        self.close_files()
        self._writable = False

    def close_files(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for index in (self._index, self._timeindex):
            if index is not None:
                if index.writable:
                    index.trim_and_close()
                else:
                    index.close()
        self._index = self._timeindex = None
        self._writable = False

    def rename_for_deletion(self) -> list[Path]:
        """Rename the files to ``*.deleted`` (fast, atomic); the caller removes them later."""
        self.close_files()
        renamed = []
        for path in (self.log_path, self.index_path, self.timeindex_path, self.txn_index.path):
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                path.rename(target)
                renamed.append(target)
        return renamed
