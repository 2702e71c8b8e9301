"""Small checkpoint files, written atomically (temp file, fsync, rename, fsync dir).

``recovery-point`` and ``log-start-offset`` hold one integer. ``leader-epoch-checkpoint``
holds Kafka's text format: a version line (0), an entry-count line, then one
``<epoch> <start offset>`` line per entry.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` by a rename, so readers see the old file or the new
    one, never a torn one; the file and its directory are fsynced."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return default


def write_int(path: Path, value: int) -> None:
    write_atomically(path, f"{value}\n")


class LeaderEpochCache:
    """Epoch -> first offset written in that epoch; what followers ask for in Step 5.

    Entries are kept sorted by epoch and by start offset. The file is replaced by a
    rename, never torn. A new epoch recorded by an append is written and fsynced with
    the log (:meth:`flush`, which the partition log calls when it flushes, rolls or
    closes), not on the append: writing it there (an fsync, and even without one a
    rename over the old file, which ext4 makes wait for the new file's blocks) stalled
    the broker for seconds when hundreds of partitions got their first records at once;
    Kafka moved this flush off the append path too (KAFKA-15046). After a crash, the
    partition log's recovery of the segments past its recovery point (the records that
    were not flushed either) assigns their epochs again from the batches, as Kafka's
    segment recovery does, and truncates entries past what the log kept. Truncations,
    rare and made when the log itself changes, are written and fsynced at once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = []
        self._dirty = False
        if path.exists():
            lines = path.read_text().split("\n")
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, start = line.split()
                self.entries.append((int(epoch), int(start)))

    def _save(self) -> None:
        body = "".join(f"{e} {s}\n" for e, s in self.entries)
        write_atomically(self.path, f"0\n{len(self.entries)}\n{body}")
        self._dirty = False

    def flush(self) -> None:
        """Write (and fsync) what :meth:`assign` recorded since the last flush."""
        if self._dirty:
            self._save()

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if already known)."""
        if self.entries and epoch <= self.entries[-1][0]:
            return
        self.entries.append((epoch, start_offset))
        self._dirty = True  # written by flush()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch: ``(largest epoch <= epoch, its end offset)``."""
        best = -1
        for i, (e, _) in enumerate(self.entries):
            if e <= epoch:
                best = i
        if best < 0:
            return -1, -1
        if best == len(self.entries) - 1:
            return self.entries[best][0], log_end_offset
        return self.entries[best][0], self.entries[best + 1][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (after log truncation)."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly before ``start_offset`` (after retention/DeleteRecords)."""
        kept: list[tuple[int, int]] = []
        for i, (e, s) in enumerate(self.entries):
            nxt = self.entries[i + 1][1] if i + 1 < len(self.entries) else None
            if nxt is not None and nxt <= start_offset:
                continue
            kept.append((e, max(s, start_offset)))
        if kept != self.entries:
            self.entries = kept
            self._save()
