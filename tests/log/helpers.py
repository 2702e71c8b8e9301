"""Building batches and logs for the log tests."""

from __future__ import annotations

from pathlib import Path

from data_plane.log.config import LogConfig
from data_plane.log.partition import PartitionLog
from data_plane.records import Record, RecordBatch

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, max_index_bytes=4096)


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(
    n: int = 3,
    *,
    ts: int = 1_000_000,
    key: bytes | None = None,
    size: int = 20,
    keys: list[bytes | None] | None = None,
    values: list[bytes | None] | None = None,
) -> bytes:
    """An uncompressed producer batch of ``n`` records (base offset 0; the log assigns)."""
    records = tuple(
        Record(
            offset=i,
            timestamp=ts + i,
            key=(keys[i] if keys else key),
            value=(values[i] if values else bytes([65 + i % 26]) * size),
        )
        for i in range(n)
    )
    return RecordBatch(base_offset=0, records=records).encode()


def open_log(path: Path, config: LogConfig = SMALL, clock: Clock | None = None) -> PartitionLog:
    return PartitionLog.open(path, config, clock or Clock())


def all_records(log: PartitionLog, start: int | None = None) -> list[Record]:
    out: list[Record] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        found = log.read(offset, 1 << 20)
        if found is None:
            break
        data = found.read()
        pos = 0
        from data_plane.records.batch import read_header

        while pos < len(data):
            header = read_header(data, pos)
            for record in RecordBatch.decode(data[pos : pos + header.size]).records:
                if record.offset >= offset:
                    out.append(record)
            pos += header.size
        offset = out[-1].offset + 1 if out else log.log_end_offset
    return out
