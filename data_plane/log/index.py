"""Sparse offset and time indexes: fixed-size entries in a memory-mapped file.

Formats (big-endian, entries sorted ascending):

* ``.index``: 8-byte entries ``(relative_offset: uint32, position: uint32)`` mapping an
  offset (relative to the segment's base offset) to the byte position of the batch that
  contains it;
* ``.timeindex``: 12-byte entries ``(timestamp: int64, relative_offset: uint32)``: the largest
  timestamp seen so far in the segment and the offset of the batch where it was seen.
  Timestamps in it never decrease.

A writable index is preallocated to ``max_bytes`` (so appends never grow the file) and
trimmed to its entries when the segment rolls or closes, as Kafka does. A trimmed file's
size therefore gives its entry count; an untrimmed file found after a crash is not trusted
and is rebuilt from the log by recovery. Memory is the OS page cache behind the mapping:
nothing proportional to the entry count lives in Python objects.

Not thread-safe: the owning :class:`~data_plane.log.segment.LogSegment` serialises access.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar


class IndexFullError(Exception):
    """No room for another entry; the segment must roll."""


class _MappedIndex:
    entry: ClassVar[struct.Struct]

    def __init__(self, path: Path, *, max_bytes: int, writable: bool) -> None:
        self.path = path
        self.writable = writable
        self.max_entries = max(1, max_bytes // self.entry.size)
        exists = path.exists()
        self.entries = 0
        self._mm: mmap.mmap | None = None
        # Appends are written with pwrite on this descriptor (kept open while writable),
        # reads go through the map (the same page cache): the first store into a fresh
        # page of a preallocated sparse file through the map took ~2 ms of page-fault
        # handling here, twice per new segment, which stalled the event loop for seconds
        # when hundreds of partitions got their first records at once.
        self._fd: int | None = None
        if not exists and not writable:
            return  # a lost index: lookups fall back to scanning the segment from its start
        fd = os.open(path, os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY, 0o644)
        try:
            size = os.fstat(fd).st_size if exists else 0
            if size % self.entry.size:
                raise ValueError(f"{path.name} is {size} bytes, not whole entries")
            self.entries = size // self.entry.size
            if writable:
                os.ftruncate(fd, self.max_entries * self.entry.size)
                self._mm = mmap.mmap(fd, self.max_entries * self.entry.size)
                self._fd, fd = fd, -1
            elif size:
                self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            if fd >= 0:
                os.close(fd)

    def __len__(self) -> int:
        return self.entries

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _read(self, i: int) -> tuple[int, int]:
        assert self._mm is not None
        a, b = self.entry.unpack_from(self._mm, i * self.entry.size)
        return a, b

    def _append(self, a: int, b: int) -> None:
        if not self.writable or self._fd is None:
            raise ValueError(f"{self.path.name} is read-only")
        if self.is_full:
            raise IndexFullError(self.path.name)
        os.pwrite(self._fd, self.entry.pack(a, b), self.entries * self.entry.size)
        self.entries += 1

    def _search(self, key: int, field: int) -> int:
        """Index of the last entry whose ``field`` is <= key, or -1."""
        lo, hi = 0, self.entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._read(mid)[field] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def truncate_to_entries(self, count: int) -> None:
        self.entries = max(0, min(count, self.entries))

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def trim_and_close(self) -> None:
        """Shrink the file to its entries (so its size tells their count) and unmap it."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, self.entries * self.entry.size)
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None
        self.writable = False

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class OffsetIndex(_MappedIndex):
    entry = struct.Struct(">II")

    def __init__(self, path: Path, base_offset: int, *, max_bytes: int, writable: bool) -> None:
        super().__init__(path, max_bytes=max_bytes, writable=writable)
        self.base_offset = base_offset

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self.entries and relative <= self._read(self.entries - 1)[0]:
            return  # entries must strictly increase; a duplicate adds nothing
        self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``, else the start."""
        i = self._search(offset - self.base_offset, 0)
        if i < 0:
            return self.base_offset, 0
        relative, position = self._read(i)
        return self.base_offset + relative, position

    def last_entry(self) -> tuple[int, int]:
        if not self.entries:
            return self.base_offset, 0
        relative, position = self._read(self.entries - 1)
        return self.base_offset + relative, position

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        self.truncate_to_entries(self._search(offset - self.base_offset - 1, 0) + 1)


class TimeIndex(_MappedIndex):
    entry = struct.Struct(">qI")

    def __init__(self, path: Path, base_offset: int, *, max_bytes: int, writable: bool) -> None:
        super().__init__(path, max_bytes=max_bytes, writable=writable)
        self.base_offset = base_offset

    def append(self, timestamp: int, offset: int) -> None:
        if self.entries and timestamp <= self._read(self.entries - 1)[0]:
            return  # only a new maximum is worth an entry
        self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry with timestamp < ``timestamp``.

        Scanning the log from that offset finds the first batch holding a timestamp >=
        ``timestamp``; with no such entry the scan starts at the segment's base offset.
        """
        i = self._search(timestamp - 1, 0)
        if i < 0:
            return -1, self.base_offset
        ts, relative = self._read(i)
        return ts, self.base_offset + relative

    def max_timestamp(self) -> int:
        if not self.entries:
            return -1
        return self._read(self.entries - 1)[0]

    def truncate_to_offset(self, offset: int) -> None:
        keep = 0
        for i in range(self.entries):
            if self.base_offset + self._read(i)[1] >= offset:
                break
            keep = i + 1
        self.truncate_to_entries(keep)
