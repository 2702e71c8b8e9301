"""Retention by time and size with an injected clock; never past the high watermark."""

from __future__ import annotations

from data_plane.log.config import LogConfig
from data_plane.log.retention import apply_retention
from tests.log.helpers import Clock, all_records, batch, open_log

DAY = 24 * 3600 * 1000


def filled(path, clock, *, config, batches=60, ts_step=1000, start_ts=0):
    log = open_log(path, config, clock)
    keys = [b"a", b"b"] if config.compact else None  # a compacted log takes only keyed records
    for i in range(batches):
        log.append(batch(2, ts=start_ts + i * ts_step, size=40, keys=keys))
    log.update_high_watermark(log.log_end_offset)
    return log


def test_time_retention_uses_the_largest_timestamp(tmp_path):
    clock = Clock(0)
    config = LogConfig(segment_bytes=1500, retention_ms=DAY)
    log = filled(tmp_path / "p", clock, config=config, start_ts=0, ts_step=1000)
    segments = len(log.segments)
    clock.now = DAY  # nothing is older than a day yet
    assert apply_retention(log, clock.now) == 0
    # Move time so that only segments whose newest record is older than a day go.
    cutoff_segment = log.segments[segments // 2]
    clock.now = cutoff_segment.max_timestamp + DAY + 1
    deleted = apply_retention(log, clock.now)
    assert 0 < deleted < segments
    assert all(clock.now - s.max_timestamp <= DAY for s in log.segments[:-1])
    assert log.log_start_offset == log.segments[0].base_offset
    assert all_records(log)[0].offset == log.log_start_offset


def test_idle_topic_ages_out_completely(tmp_path):
    clock = Clock(0)
    log = filled(
        tmp_path / "p", clock, config=LogConfig(segment_bytes=1 << 20, retention_ms=DAY), batches=5
    )
    assert len(log.segments) == 1
    clock.now = 10 * DAY
    apply_retention(log, clock.now)
    assert log.log_start_offset == log.log_end_offset == 10
    assert all_records(log) == []
    assert log.append(batch(1)).first_offset == 10


def test_size_retention_keeps_at_most_retention_bytes(tmp_path):
    clock = Clock(0)
    config = LogConfig(segment_bytes=1500, retention_bytes=4000, retention_ms=-1)
    log = filled(tmp_path / "p", clock, config=config)
    assert log.size_bytes > 4000
    apply_retention(log, clock.now)
    assert log.size_bytes - log.segments[0].size < 4000 <= log.size_bytes + 1500
    assert log.size_bytes <= 4000 + 1500


def test_never_deletes_at_or_above_the_high_watermark(tmp_path):
    clock = Clock(0)
    config = LogConfig(segment_bytes=1500, retention_ms=DAY)
    log = filled(tmp_path / "p", clock, config=config)
    log.update_high_watermark(log.segments[1].base_offset)  # only the first segment is below
    clock.now = 100 * DAY
    assert apply_retention(log, clock.now) == 1
    assert log.log_start_offset == log.segments[0].base_offset


def test_compact_only_policy_ignores_time_and_size(tmp_path):
    clock = Clock(0)
    config = LogConfig(
        segment_bytes=1500, retention_ms=DAY, retention_bytes=100, compact=True, delete=False
    )
    log = filled(tmp_path / "p", clock, config=config)
    clock.now = 100 * DAY
    assert apply_retention(log, clock.now) == 0


def test_deleted_files_are_renamed_then_purged_after_the_delay(tmp_path):
    clock = Clock(0)
    log = filled(tmp_path / "p", clock, config=LogConfig(segment_bytes=1500, retention_ms=DAY))
    clock.now = 100 * DAY
    apply_retention(log, clock.now)
    renamed = [p for p in (tmp_path / "p").iterdir() if p.name.endswith(".deleted")]
    assert renamed
    assert log.purge_deleted(delay_ms=60_000) == 0
    clock.now += 60_000
    assert log.purge_deleted(delay_ms=60_000) == len(renamed)
    assert not [p for p in (tmp_path / "p").iterdir() if p.name.endswith(".deleted")]
