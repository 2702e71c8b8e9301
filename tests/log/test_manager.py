"""LogManager: layout by topic UUID, parallel open, maintenance, clean close."""

from __future__ import annotations

import uuid

from data_plane.log.config import LogConfig
from data_plane.log.manager import LogManager, TopicPartition
from tests.log.helpers import Clock, batch

DAY = 24 * 3600 * 1000


def test_layout_open_all_and_maintenance(tmp_path):
    clock = Clock(0)
    topic = uuid.uuid4()
    # file.delete.delay.ms 0: deleted segments' files go in the same maintenance pass.
    configs = {topic: LogConfig(segment_bytes=1500, retention_ms=DAY, file_delete_delay_ms=0)}
    manager = LogManager(tmp_path, configs.__getitem__, clock=clock)
    tps = [TopicPartition(topic, p) for p in range(3)]
    for tp in tps:
        log = manager.get_or_create(tp)
        for _ in range(30):
            log.append(batch(2, ts=0, size=40))
        log.update_high_watermark(log.log_end_offset)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{topic}-{p}" for p in range(3))
    (tmp_path / "not-a-partition").mkdir()
    manager.close_all()

    reopened = LogManager(tmp_path, configs.__getitem__, clock=clock)
    assert sorted(reopened.open_all(), key=lambda tp: tp.partition) == tps
    assert all(reopened.get(tp).opened_cleanly for tp in tps)
    for tp in tps:
        reopened.get(tp).update_high_watermark(60)
    clock.now = 10 * DAY
    report = reopened.run_maintenance()
    assert report.segments_deleted > 0 and report.files_purged > 0
    assert all(reopened.get(tp).log_start_offset == 60 for tp in tps)
    reopened.delete(tps[0])
    assert not (tmp_path / tps[0].dirname).exists()
    reopened.close_all()


def test_topic_partition_dirname_round_trip():
    tp = TopicPartition(uuid.uuid4(), 12)
    assert TopicPartition.parse(tp.dirname) == tp
    assert TopicPartition.parse("orders-1") is None
    assert TopicPartition.parse("x") is None


def test_background_maintenance_starts_and_stops(tmp_path):
    manager = LogManager(tmp_path, lambda _: LogConfig(), clock=Clock(0))
    manager.start(interval_seconds=0.01)
    manager.stop()
    manager.close_all()


def test_file_delete_delay_is_the_topics(tmp_path):
    clock = Clock(0)
    topic = uuid.uuid4()
    delay = 5 * 60_000
    configs = {topic: LogConfig(segment_bytes=1500, retention_ms=DAY, file_delete_delay_ms=delay)}
    manager = LogManager(tmp_path, configs.__getitem__, clock=clock)
    tp = TopicPartition(topic, 0)
    log = manager.get_or_create(tp)
    for _ in range(30):
        log.append(batch(2, ts=0, size=40))
    log.update_high_watermark(log.log_end_offset)
    clock.now = 10 * DAY
    first = manager.run_maintenance()
    assert first.segments_deleted > 0 and first.files_purged == 0  # renamed, kept
    clock.now += delay - 1
    assert manager.run_maintenance().files_purged == 0
    clock.now += 1
    assert manager.run_maintenance().files_purged > 0
    manager.close_all()
