"""Many partition logs under one data directory, and their maintenance schedule.

Layout: ``<data dir>/<topic uuid>-<partition>/`` per partition (the topic's UUID, never its
tenant-facing name). ``open_all`` opens every partition found, in parallel threads, so a
broker with many partitions recovers them concurrently. ``run_maintenance`` applies
retention (delete policy), compaction (compact policy, rate-limited to
``cleaner_io_bytes_per_second``), the ``flush.ms`` policy and delayed file deletion;
``start`` runs it periodically on a background thread until ``stop``.

Thread safety: the registry is guarded by a lock; each log guards itself.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from data_plane.log.compaction import compact
from data_plane.log.config import LogConfig
from data_plane.log.partition import Clock, PartitionLog, wall_clock_ms
from data_plane.log.retention import apply_retention

logger = logging.getLogger(__name__)

ConfigLookup = Callable[[uuid.UUID], LogConfig]


class TopicPartition(NamedTuple):
    """A partition's key in maps and waiters (a tuple: built and hashed on every request)."""

    topic_id: uuid.UUID
    partition: int

    @property
    def dirname(self) -> str:
        return f"{self.topic_id}-{self.partition}"

    @classmethod
    def parse(cls, dirname: str) -> TopicPartition | None:
        head, sep, tail = dirname.rpartition("-")
        if not sep or not tail.isdigit():
            return None
        try:
            return cls(uuid.UUID(head), int(tail))
        except ValueError:
            return None


@dataclass
class MaintenanceReport:
    segments_deleted: int = 0
    records_compacted: int = 0
    files_purged: int = 0


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        config_for: ConfigLookup,
        *,
        clock: Clock = wall_clock_ms,
        cleaner_io_bytes_per_second: int | None = 50 * 2**20,
        recovery_threads: int = 4,
    ) -> None:
        self.data_dir = data_dir
        self.config_for = config_for
        self.clock = clock
        self.cleaner_io_bytes_per_second = cleaner_io_bytes_per_second
        self.recovery_threads = recovery_threads
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        data_dir.mkdir(parents=True, exist_ok=True)

    def open_all(self) -> list[TopicPartition]:
        found = [
            (tp, path)
            for path in sorted(self.data_dir.iterdir())
            if path.is_dir() and (tp := TopicPartition.parse(path.name)) is not None
        ]

        def load(item: tuple[TopicPartition, Path]) -> tuple[TopicPartition, PartitionLog]:
            tp, path = item
            return tp, PartitionLog.open(path, self.config_for(tp.topic_id), self.clock)

        with ThreadPoolExecutor(max_workers=self.recovery_threads) as pool:
            opened = list(pool.map(load, found))
        with self._lock:
            self._logs.update(opened)
        return [tp for tp, _ in opened]

    def get(self, tp: TopicPartition) -> PartitionLog | None:
        with self._lock:
            return self._logs.get(tp)

    def get_or_create(self, tp: TopicPartition, config: LogConfig | None = None) -> PartitionLog:
        with self._lock:
            log = self._logs.get(tp)
            if log is None:
                log = PartitionLog.open(
                    self.data_dir / tp.dirname, config or self.config_for(tp.topic_id), self.clock
                )
                self._logs[tp] = log
            return log

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return sorted(self._logs, key=lambda tp: (str(tp.topic_id), tp.partition))

    def delete(self, tp: TopicPartition) -> None:
        with self._lock:
            log = self._logs.pop(tp, None)
        if log is not None:
            log.delete()

    def run_maintenance(self) -> MaintenanceReport:
        report = MaintenanceReport()
        for tp in self.partitions():
            log = self.get(tp)
            if log is None or log.closed:
                continue
            try:
                now = self.clock()
                report.segments_deleted += apply_retention(log, now)
                if log.config.compact:
                    active = log.segments[-1]
                    if active.size and now - active.created_ms >= log.config.max_compaction_lag_ms:
                        log.roll(now)  # max.compaction.lag.ms: make it cleanable
                    result = compact(log, now, io_bytes_per_second=self.cleaner_io_bytes_per_second)
                    report.records_compacted += result.records_removed
                if log.config.flush_ms is not None:
                    log._maybe_flush(now)
                report.files_purged += log.purge_deleted(delay_ms=log.config.file_delete_delay_ms)
            except OSError:
                logger.exception("maintenance of %s failed; will retry", tp.dirname)
        return report

    def start(self, interval_seconds: float = 30.0) -> None:
        """Run maintenance every ``interval_seconds`` on a daemon thread."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval_seconds):
                self.run_maintenance()

        self._thread = threading.Thread(target=loop, name="log-maintenance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close_all(self) -> None:
        """Stop maintenance and close every log cleanly (so the next open is fast)."""
        self.stop()
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()
        for log in logs:
            log.close()
