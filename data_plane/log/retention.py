"""Retention for cleanup.policy=delete: by time, by size, and by the log start offset.

Only whole sealed segments are deleted, oldest first, never one holding offsets at or
above the high watermark. Time retention compares ``now`` with a segment's largest
record timestamp (so a late-arriving old record cannot keep a fresh segment alive, and a
fresh record keeps its segment). If the active segment itself has expired and is fully
below the high watermark, it is rolled first so that idle topics still age out, as in
Kafka. Deletion renames files to ``*.deleted``; :meth:`PartitionLog.purge_deleted` removes
them after a delay.
"""

from __future__ import annotations

from data_plane.log.partition import PartitionLog
from data_plane.log.segment import LogSegment


def apply_retention(log: PartitionLog, now_ms: int) -> int:
    """Delete what retention allows; returns the number of segments deleted."""
    with log._lock:
        deleted = log.delete_oldest_segments(lambda s: _next_base(log, s) <= log.log_start_offset)
        config = log.config
        if not config.delete:
            return deleted
        if config.retention_ms >= 0:

            def expired(segment: LogSegment) -> bool:
                return now_ms - segment.max_timestamp > config.retention_ms

            _roll_if_expired(log, expired, now_ms)
            deleted += log.delete_oldest_segments(expired)
        if config.retention_bytes >= 0:
            excess = log.size_bytes - config.retention_bytes

            def over_size(segment: LogSegment) -> bool:
                nonlocal excess
                if excess >= segment.size:
                    excess -= segment.size
                    return True
                return False

            deleted += log.delete_oldest_segments(over_size)
        return deleted


def _next_base(log: PartitionLog, segment: LogSegment) -> int:
    i = log.segments.index(segment)
    return log.segments[i + 1].base_offset if i + 1 < len(log.segments) else log.log_end_offset


def _roll_if_expired(log: PartitionLog, expired: object, now_ms: int) -> None:
    active = log.segments[-1]
    if (
        active.size > 0
        and callable(expired)
        and expired(active)
        and log.log_end_offset <= log.high_watermark
    ):
        log.roll(now_ms)
