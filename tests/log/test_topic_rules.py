"""compression.type and message.timestamp.before/after.max.ms on the append path."""

from __future__ import annotations

import pytest

from data_plane.log.config import LogConfig
from data_plane.records import Record, RecordBatch
from data_plane.records.batch import InvalidRecordBatch, iter_batches
from data_plane.records.compression import Compression
from tests.log.helpers import Clock, all_records, open_log

NOW = 1_000_000_000


def stored_codecs(log):
    found = log.read(0, 1 << 24)
    return [h.compression for h in iter_batches(found.read())]


def producer_batch(codec, *, timestamps=(NOW, NOW + 1, NOW + 2), producer_id=7, sequence=0):
    records = tuple(
        Record(i, ts, b"k%d" % i, b"value-%d" % i * 20) for i, ts in enumerate(timestamps)
    )
    return RecordBatch(
        0,
        records,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    ).encode()


@pytest.mark.parametrize(
    ("target", "sent", "stored"),
    [
        (Compression.ZSTD, Compression.GZIP, Compression.ZSTD),
        (Compression.NONE, Compression.LZ4, Compression.NONE),
        (Compression.GZIP, Compression.NONE, Compression.GZIP),
        (None, Compression.SNAPPY, Compression.SNAPPY),  # compression.type=producer
    ],
)
def test_batches_are_stored_with_the_topics_codec(tmp_path, target, sent, stored):
    log = open_log(tmp_path / "p", LogConfig(compression=target), Clock(NOW))
    original = RecordBatch.decode(producer_batch(sent))
    log.append(producer_batch(sent))
    assert stored_codecs(log) == [stored]
    kept = all_records(log)
    assert [(r.key, r.value, r.timestamp) for r in kept] == [
        (r.key, r.value, r.timestamp) for r in original.records
    ]
    # The producer's identity survives the recompression: a retry is still a duplicate.
    assert log.append(producer_batch(sent)).duplicate
    assert log.log_end_offset == 3


def test_records_outside_the_timestamp_bounds_are_refused_and_nothing_is_stored(tmp_path):
    config = LogConfig(timestamp_before_max_ms=60_000, timestamp_after_max_ms=1_000)
    log = open_log(tmp_path / "p", config, Clock(NOW))
    for timestamps, index in (((NOW, NOW - 61_000), 1), ((NOW + 2_000,), 0)):
        with pytest.raises(InvalidRecordBatch) as refused:
            log.append(producer_batch(Compression.LZ4, timestamps=timestamps, producer_id=-1))
        assert (refused.value.reason, refused.value.record_index) == ("bad_timestamp", index)
    assert log.log_end_offset == 0
    log.append(producer_batch(Compression.LZ4, timestamps=(NOW - 59_000, NOW + 500)))
    assert log.log_end_offset == 2


def test_log_append_time_topics_do_not_judge_producer_timestamps(tmp_path):
    config = LogConfig(log_append_time=True, timestamp_before_max_ms=1, timestamp_after_max_ms=1)
    log = open_log(tmp_path / "p", config, Clock(NOW))
    log.append(producer_batch(Compression.NONE, timestamps=(1, 2, 3)))
    assert log.log_end_offset == 3


def test_topic_configs_reach_the_log():
    config = LogConfig.from_topic_configs(
        {
            "delete.retention.ms": 1234,
            "segment.index.bytes": 8192,
            "file.delete.delay.ms": 0,
            "compression.type": "lz4",
            "message.timestamp.before.max.ms": 10,
        }
    )
    assert (config.delete_retention_ms, config.max_index_bytes) == (1234, 8192)
    assert config.file_delete_delay_ms == 0 and config.compression is Compression.LZ4
    assert config.checks_timestamps
    defaults = LogConfig.from_topic_configs({})
    assert defaults.compression is None and not defaults.checks_timestamps


def test_dirty_ratio_is_validated_like_kafkas():
    from data_plane.topic_config import InvalidConfig, parse_config_value

    assert parse_config_value("min.cleanable.dirty.ratio", "0.25") == "0.25"
    for bad in ("abc", "1.5", "-0.1"):
        with pytest.raises(InvalidConfig):
            parse_config_value("min.cleanable.dirty.ratio", bad)


def test_max_compaction_lag_rolls_the_active_segment_so_it_can_be_cleaned(tmp_path):
    import uuid

    from data_plane.log.manager import LogManager, TopicPartition

    clock = Clock(0)
    topic = uuid.uuid4()
    config = LogConfig(compact=True, delete=False, max_compaction_lag_ms=60_000)
    manager = LogManager(tmp_path, {topic: config}.__getitem__, clock=clock)
    log = manager.get_or_create(TopicPartition(topic, 0))
    for i in range(10):
        log.append(producer_batch(Compression.NONE, timestamps=(i,), producer_id=-1))
    log.update_high_watermark(log.log_end_offset)
    manager.run_maintenance()
    assert len(log.segments) == 1  # young: still the active segment
    clock.now = 60_000
    report = manager.run_maintenance()
    assert len(log.segments) == 2 and report.records_compacted >= 0
    assert log.cleaner_offset == 10  # the rolled segment was cleaned
    manager.close_all()
