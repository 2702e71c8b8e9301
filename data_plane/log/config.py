"""Per-partition log settings, derived from a topic's effective configs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from data_plane.records.compression import Compression
from data_plane.topic_config import INT64_MAX, effective_configs

# compression.type -> the codec batches are stored with (None: as the producer sent them).
STORED_CODEC = {
    "producer": None,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 2**30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 * 2**20
    max_message_bytes: int = 1_048_588
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    compact: bool = False
    delete: bool = True
    delete_retention_ms: int = 24 * 3600 * 1000
    # None: leave flushing to the OS (Kafka's default); see PartitionLog's docstring.
    flush_messages: int | None = None
    flush_ms: int | None = None
    log_append_time: bool = False
    # Compaction: min/max.compaction.lag.ms and min.cleanable.dirty.ratio (Kafka's).
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    min_cleanable_dirty_ratio: float = 0.5
    # file.delete.delay.ms: how long a deleted segment's renamed files are kept.
    file_delete_delay_ms: int = 60_000
    # compression.type: the codec producer batches are stored with (None: as they came).
    compression: Compression | None = None
    # message.timestamp.before/after.max.ms (CreateTime only): INT64_MAX means no bound.
    timestamp_before_max_ms: int = INT64_MAX
    timestamp_after_max_ms: int = INT64_MAX

    @property
    def checks_timestamps(self) -> bool:
        return not self.log_append_time and (
            self.timestamp_before_max_ms < INT64_MAX or self.timestamp_after_max_ms < INT64_MAX
        )

    def with_retention_ceiling(self, ceiling_ms: int | None) -> LogConfig:
        """This config with retention.ms at most ``ceiling_ms`` (a plan's ceiling): an
        unlimited (-1) or longer retention becomes the ceiling."""
        if ceiling_ms is None or 0 <= self.retention_ms <= ceiling_ms:
            return self
        return replace(self, retention_ms=ceiling_ms)

    @classmethod
    def from_topic_configs(cls, overrides: Mapping[str, Any], **extra: Any) -> LogConfig:
        c = effective_configs(overrides)
        policy = str(c["cleanup.policy"]).split(",")
        return cls(
            segment_bytes=int(c["segment.bytes"]),
            segment_ms=int(c["segment.ms"]),
            max_message_bytes=int(c["max.message.bytes"]),
            retention_ms=int(c["retention.ms"]),
            retention_bytes=int(c["retention.bytes"]),
            compact="compact" in policy,
            delete="delete" in policy,
            log_append_time=c["message.timestamp.type"] == "LogAppendTime",
            compression=STORED_CODEC[str(c["compression.type"])],
            delete_retention_ms=int(c["delete.retention.ms"]),
            min_compaction_lag_ms=int(c["min.compaction.lag.ms"]),
            max_compaction_lag_ms=int(c["max.compaction.lag.ms"]),
            min_cleanable_dirty_ratio=float(str(c["min.cleanable.dirty.ratio"])),
            max_index_bytes=int(c["segment.index.bytes"]),
            file_delete_delay_ms=int(c["file.delete.delay.ms"]),
            timestamp_before_max_ms=int(c["message.timestamp.before.max.ms"]),
            timestamp_after_max_ms=int(c["message.timestamp.after.max.ms"]),
            **extra,
        )
