"""Per-partition log settings, derived from a topic's effective configs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from data_plane.topic_config import effective_configs


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
            **extra,
        )
