"""The high-watermark checkpoint (``replication-offset-checkpoint``), as Kafka keeps it.

Written every few seconds and at shutdown, read once at start-up: a restarted replica
never exposes more than was committed before it stopped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path

from data_plane.log.checkpoint import write_atomically
from data_plane.log.manager import TopicPartition

CHECKPOINT = "replication-offset-checkpoint"


def read_high_watermarks(data_dir: Path) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    try:
        lines = (data_dir / CHECKPOINT).read_text().split("\n")
    except OSError:
        return out
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3:
            out[TopicPartition(uuid.UUID(parts[0]), int(parts[1]))] = int(parts[2])
    return out


def write_high_watermarks(data_dir: Path, rows: Iterable[tuple[TopicPartition, int]]) -> None:
    lines = [f"{tp.topic_id} {tp.partition} {hw}\n" for tp, hw in rows]
    data_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(data_dir / CHECKPOINT, f"0\n{len(lines)}\n{''.join(lines)}")
