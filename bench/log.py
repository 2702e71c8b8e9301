"""Partition-log benchmark: ``python -m bench.log [--dir D] [--quick]``.

Prints one JSON line per workload, each with a raw-disk baseline measured in the same run,
in the same directory, on the same bytes:

* ``append_1k``: 1 KiB records in ~1 MiB batches; baseline: ``os.write`` of the same batches;
* ``append_100b``: 100-byte records in batches of 100; same baseline;
* ``read_sequential``: the whole ``append_1k`` log through ``PartitionLog.read`` in 1 MiB
  fetches; baseline: ``os.read`` of the segment files in 1 MiB chunks (page cache warm for
  both);
* ``lookup_offset`` / ``lookup_timestamp``: random lookups; baseline: a random 61-byte pread;
* ``reopen_clean`` / ``reopen_crash``: a 1 GiB, 1,000-segment log; baseline: listing and
  stat-ing its files. The crash case leaves unflushed data in the active segment only.

Neither side fsyncs inside the timed loop (the log's default leaves flushing to the OS);
``os.sync()`` runs before every timed run so neither pays for the other's writeback. Every
loop is bounded by
the byte or record counts below. CPU seconds per GB are process CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_plane.log.config import LogConfig
from data_plane.log.partition import PartitionLog
from data_plane.records import Record, RecordBatch
from data_plane.records.batch import read_header

MiB = 2**20
GiB = 2**30


def _batch(records: int, value_size: int, ts: int = 1_700_000_000_000) -> bytes:
    rnd = random.Random(records * 7919 + value_size)  # noqa: S311 (benchmark data)
    value = rnd.randbytes(value_size)
    return RecordBatch(
        base_offset=0,
        records=tuple(Record(i, ts + i, f"key-{i}".encode(), value) for i in range(records)),
    ).encode()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / MiB, 1)


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, time.process_time() - cpu0, result


def _raw_write(path: Path, batch: bytes, count: int) -> tuple[float, float]:
    os.sync()  # start with no dirty pages, as the log run does

    def run() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for _ in range(count):
                os.write(fd, batch)
        finally:
            os.close(fd)

    wall, cpu, _ = _timed(run)
    path.unlink()
    return wall, cpu


def _emit(name: str, **fields: Any) -> None:
    print(json.dumps({"workload": name, **fields}), flush=True)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def bench_append(
    workdir: Path,
    name: str,
    batch: bytes,
    count: int,
    records: int,
    config: LogConfig,
    repeats: int,
) -> PartitionLog:
    """Alternate raw and log runs ``repeats`` times (after a warm-up); report medians."""
    total = len(batch) * count
    _raw_write(workdir / f"{name}.warmup", batch, max(1, count // 8))
    raw_walls: list[float] = []
    raw_cpus: list[float] = []
    walls: list[float] = []
    cpus: list[float] = []
    log: PartitionLog | None = None
    for i in range(repeats):
        raw_wall, raw_cpu = _raw_write(workdir / f"{name}.raw", batch, count)
        raw_walls.append(raw_wall)
        raw_cpus.append(raw_cpu)
        if log is not None:
            log.close()
            shutil.rmtree(log.directory)
        log = PartitionLog.open(workdir / f"{name}-{i}", config)
        current = log
        os.sync()  # the raw run's dirty pages must not slow this one down

        def run(current: PartitionLog = current) -> None:
            for _ in range(count):
                current.append(batch)

        wall, cpu, _ = _timed(run)
        walls.append(wall)
        cpus.append(cpu)
    assert log is not None
    ratios = [r / w for r, w in zip(raw_walls, walls, strict=True)]
    _emit(
        name,
        bytes=total,
        records=records * count,
        batch_bytes=len(batch),
        repeats=repeats,
        mb_per_s=round(total / MiB / _median(walls), 1),
        records_per_s=round(records * count / _median(walls)),
        records_per_s_range=[
            round(records * count / max(walls)),
            round(records * count / min(walls)),
        ],
        raw_mb_per_s=round(total / MiB / _median(raw_walls), 1),
        raw_mb_per_s_range=[
            round(total / MiB / max(raw_walls), 1),
            round(total / MiB / min(raw_walls), 1),
        ],
        ratio_to_raw=round(_median(ratios), 3),
        ratio_range=[round(min(ratios), 3), round(max(ratios), 3)],
        cpu_s_per_gb=round(_median(cpus) / (total / GiB), 2),
        raw_cpu_s_per_gb=round(_median(raw_cpus) / (total / GiB), 2),
        fsync=False,
    )
    return log


def bench_read(log: PartitionLog) -> None:
    def run() -> int:
        offset, total = log.log_start_offset, 0
        while offset < log.log_end_offset:
            found = log.read(offset, MiB)
            if found is None:
                break
            data = found.read()
            total += len(data)
            pos = 0
            while pos < len(data):  # the offset after the last whole batch returned
                header = read_header(data, pos)
                offset = header.next_offset
                pos += header.size
        return total

    def raw() -> int:
        total = 0
        for segment in log.segments:
            fd = os.open(segment.log_path, os.O_RDONLY)
            try:
                while chunk := os.read(fd, MiB):
                    total += len(chunk)
            finally:
                os.close(fd)
        return total

    raw_wall, _, raw_bytes = _timed(raw)
    wall, cpu, total = _timed(run)
    assert total == raw_bytes, (total, raw_bytes)
    _emit(
        "read_sequential",
        bytes=total,
        mb_per_s=round(total / MiB / wall, 1),
        raw_mb_per_s=round(raw_bytes / MiB / raw_wall, 1),
        ratio_to_raw=round(raw_wall / wall, 3),
        cpu_s_per_gb=round(cpu / (total / GiB), 2),
        page_cache="warm",
    )


def bench_lookups(log: PartitionLog, count: int, ts_count: int) -> None:
    rnd = random.Random(42)  # noqa: S311 (benchmark sampling)
    offsets = [rnd.randrange(log.log_start_offset, log.log_end_offset) for _ in range(count)]
    wall, _, _ = _timed(lambda: [log.read(o, 1) for o in offsets])
    files = [s.log_path for s in log.segments]
    sizes = [p.stat().st_size for p in files]

    def raw() -> None:
        for _ in range(count):
            i = rnd.randrange(len(files))
            fd = os.open(files[i], os.O_RDONLY)
            os.pread(fd, 61, rnd.randrange(max(1, sizes[i] - 61)))
            os.close(fd)

    raw_wall, _, _ = _timed(raw)
    _emit(
        "lookup_offset",
        lookups=count,
        us_per_lookup=round(wall / count * 1e6, 1),
        raw_pread_us=round(raw_wall / count * 1e6, 1),
    )
    first_ts = 1_700_000_000_000
    stamps = [first_ts + rnd.randrange(0, 1000) for _ in range(ts_count)]
    wall, _, _ = _timed(lambda: [log.offset_for_timestamp(t) for t in stamps])
    _emit(
        "lookup_timestamp",
        lookups=ts_count,
        us_per_lookup=round(wall / ts_count * 1e6, 1),
        raw_pread_us=round(raw_wall / count * 1e6, 1),
    )


def bench_reopen(workdir: Path, total_bytes: int, segments: int) -> None:
    segment_bytes = max(MiB // 16, total_bytes // segments)
    config = LogConfig(segment_bytes=segment_bytes, max_message_bytes=segment_bytes)
    batch = _batch(max(1, min(64, segment_bytes // 1100 // 4)), 1024)
    path = workdir / "reopen"
    log = PartitionLog.open(path, config)
    while log.size_bytes < total_bytes:
        log.append(batch)
    size, count = log.size_bytes, len(log.segments)
    log.close()

    def stat_all() -> int:
        return sum(p.stat().st_size for p in path.iterdir())

    raw_wall, _, _ = _timed(stat_all)
    rss_before = _rss_mb()
    wall, _, log = _timed(lambda: PartitionLog.open(path, config))
    _emit(
        "reopen_clean",
        bytes=size,
        segments=count,
        seconds=round(wall, 4),
        raw_stat_seconds=round(raw_wall, 4),
        rss_mb=_rss_mb(),
        rss_before_mb=rss_before,
        log_end_offset=log.log_end_offset,
    )
    # Crash: append ~16 MiB more (unflushed, all in the active segment), drop without close.
    tail = 0
    while tail < 16 * MiB:
        log.append(batch)
        tail += len(batch)
    end = log.log_end_offset
    active_bytes = log.segments[-1].size
    for segment in log.segments:
        segment.close_files()
    wall, _, log = _timed(lambda: PartitionLog.open(path, config))
    assert log.log_end_offset == end
    _emit(
        "reopen_crash",
        bytes=log.size_bytes,
        segments=len(log.segments),
        seconds=round(wall, 4),
        scanned_bytes=active_bytes,
        unflushed_bytes=tail,
        raw_stat_seconds=round(raw_wall, 4),
        rss_mb=_rss_mb(),
    )
    log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--repeats", type=int, default=5, help="runs per append workload")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="millrace-bench-", dir=args.dir))
    scale = 1 / 64 if args.quick else 1.0
    try:
        big = _batch(1000, 1024)  # ~1 MiB
        repeats = 1 if args.quick else args.repeats
        log_1k = bench_append(
            workdir,
            "append_1k",
            big,
            max(4, int(1024 * scale)),
            1000,
            LogConfig(segment_bytes=GiB, max_message_bytes=2 * MiB),
            repeats,
        )
        small = _batch(100, 100)
        log_100 = bench_append(
            workdir,
            "append_100b",
            small,
            max(100, int(50_000 * scale)),
            100,
            LogConfig(segment_bytes=GiB),
            repeats,
        )
        log_100.close()
        shutil.rmtree(log_100.directory)
        bench_read(log_1k)
        bench_lookups(log_1k, max(100, int(20_000 * scale)), max(20, int(500 * scale)))
        log_1k.close()
        shutil.rmtree(log_1k.directory)
        bench_reopen(workdir, max(8 * MiB, int(GiB * scale)), 1000 if not args.quick else 64)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
