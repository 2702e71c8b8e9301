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
