"""PartitionLog behaviour: offsets, reads, rolls, timestamps, truncation, bad input, I/O errors."""

from __future__ import annotations

import errno
import os

import pytest

from data_plane.log.config import LogConfig
from data_plane.log.partition import LogIOError, OffsetOutOfRange
from data_plane.records import InvalidRecordBatch, Record, RecordBatch, TimestampType
from data_plane.records.batch import read_header
from tests.log.helpers import SMALL, Clock, all_records, batch, open_log


def test_offsets_are_assigned_in_order_and_unique(tmp_path):
    log = open_log(tmp_path / "p")
    infos = [log.append(batch(3)) for _ in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert log.log_end_offset == 12
    assert [r.offset for r in all_records(log)] == list(range(12))


def test_stored_bytes_are_the_producers_bytes_with_the_base_offset_rewritten(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch(2))
    raw = batch(2, size=33)
    log.append(raw)
    found = log.read(2, 1 << 20)
    stored = found.read()
    assert stored[8:] == raw[8:]  # everything after base_offset untouched
    assert read_header(stored).base_offset == 2


def test_multi_batch_append_is_atomic(tmp_path):
    log = open_log(tmp_path / "p")
    good = batch(2)
    bad = bytearray(batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidRecordBatch) as info:
        log.append(good + bytes(bad))
    assert info.value.reason == "bad_crc"
    assert log.log_end_offset == 0 and log.size_bytes == 0
    info = log.append(good + batch(3))
    assert (info.first_offset, info.last_offset, info.batches) == (0, 4, 2)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"\x00" * 30, "truncated"),
        (batch(2)[:-3], "truncated"),
        (batch(2, size=5000), "too_large"),
    ],
)
def test_bad_input_leaves_the_log_untouched(tmp_path, data, reason):
    log = open_log(tmp_path / "p", LogConfig(segment_bytes=1 << 20, max_message_bytes=4000))
    log.append(batch(1))
    before = (log.log_end_offset, log.size_bytes)
    with pytest.raises(InvalidRecordBatch) as info:
        log.append(data)
    assert info.value.reason == reason
    assert (log.log_end_offset, log.size_bytes) == before


def test_non_contiguous_producer_batch_is_rejected(tmp_path):
    gappy = RecordBatch(
        base_offset=0, records=(Record(0, 1, None, b"a"), Record(5, 1, None, b"b"))
    ).encode()
    log = open_log(tmp_path / "p")
    with pytest.raises(InvalidRecordBatch) as info:
        log.append(gappy)
    assert info.value.reason == "bad_count"
    # Replication keeps offsets as they are (compacted batches have gaps).
    assert log.append(gappy, assign_offsets=False).last_offset == 5


def test_replicated_batches_must_continue_the_log(tmp_path):
    log = open_log(tmp_path / "p")
    moved = RecordBatch(base_offset=7, records=(Record(7, 1, None, b"a"),)).encode()
    with pytest.raises(InvalidRecordBatch) as info:
        log.append(moved, assign_offsets=False)
    assert info.value.reason == "bad_offset"


def test_io_error_on_append_fails_cleanly(tmp_path, monkeypatch):
    log = open_log(tmp_path / "p")
    log.append(batch(3))
    real_pwritev = os.pwritev

    def full_disk(fd, buffers, offset):
        real_pwritev(fd, buffers[:1], offset)  # a partial write, then ENOSPC
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full_disk)
    with pytest.raises(LogIOError):
        log.append(batch(3))
    monkeypatch.setattr(os, "pwritev", real_pwritev)
    assert log.log_end_offset == 3
    assert [r.offset for r in all_records(log)] == [0, 1, 2]
    assert log.append(batch(1)).first_offset == 3
    log.close()
    assert open_log(tmp_path / "p").log_end_offset == 4


def test_roll_on_size_time_and_full_index(tmp_path):
    clock = Clock()
    log = open_log(
        tmp_path / "p",
        LogConfig(
            segment_bytes=1000, segment_ms=60_000, index_interval_bytes=1, max_index_bytes=8 * 3
        ),
        clock,
    )
    for _ in range(3):
        log.append(batch(2, size=100))  # ~300 B each: 3 fit under 1000
    assert len(log.segments) == 1
    log.append(batch(2, size=100))
    assert len(log.segments) == 2  # size
    clock.now += 60_000
    log.append(batch(1))
    assert len(log.segments) == 3  # time
    for _ in range(3):
        log.append(batch(1))
    assert len(log.segments) == 4  # the index (3 entries, one per batch) filled
    assert [s.base_offset for s in log.segments] == [0, 6, 8, 11]
    assert log.recovery_point == 11  # rolled segments are flushed
    assert [r.offset for r in all_records(log)] == list(range(12))


def test_read_bounds_min_one_and_high_watermark(tmp_path):
    log = open_log(tmp_path / "p", LogConfig(segment_bytes=1 << 20))
    for _ in range(5):
        log.append(batch(2, size=100))
    one = log.read(0, 10)  # smaller than a batch: still one whole batch
    assert one.first_offset == 0 and read_header(one.read()).size == one.length
    assert log.read(0, 10, min_one=False) is None
    assert log.read(3, 1 << 20).first_offset == 2  # the batch containing offset 3
    log.update_high_watermark(6)
    bounded = log.read(0, 1 << 20, max_offset=log.high_watermark).read()
    headers = []
    pos = 0
    while pos < len(bounded):
        headers.append(read_header(bounded, pos))
        pos += headers[-1].size
    assert headers[-1].last_offset == 5
    assert log.read(6, 1 << 20, max_offset=6) is None
    assert log.read(10, 100) is None  # at the log end
    with pytest.raises(OffsetOutOfRange):
        log.read(11, 100)


def test_offset_for_timestamp_across_segments(tmp_path):
    log = open_log(tmp_path / "p")
    for i in range(30):
        log.append(batch(3, ts=10_000 + i * 100))
    assert len(log.segments) > 1
    assert log.offset_for_timestamp(0).offset == 0
    hit = log.offset_for_timestamp(10_000 + 17 * 100 + 1)
    assert (hit.offset, hit.timestamp) == (17 * 3 + 1, 10_000 + 1701)
    assert log.offset_for_timestamp(10_000 + 29 * 100 + 3) is None


def test_log_append_time(tmp_path):
    clock = Clock(5_555_555)
    log = open_log(tmp_path / "p", LogConfig(log_append_time=True), clock)
    info = log.append(batch(3, ts=1))
    assert info.log_append_time == 5_555_555
    decoded = RecordBatch.decode(log.read(0, 1 << 20).read())
    assert decoded.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert decoded.max_timestamp == 5_555_555
    assert log.offset_for_timestamp(5_000_000).offset == 0


def test_truncate_within_and_across_segments(tmp_path):
    log = open_log(tmp_path / "p")
    for _ in range(60):
        log.append(batch(2, size=60))
    segments = len(log.segments)
    assert segments > 2
    log.truncate_to(51)  # mid-batch: the batch [50, 51] goes
    assert log.log_end_offset == 50
    assert len(log.segments) < segments
    assert [r.offset for r in all_records(log)][-1] == 49
    assert log.append(batch(1)).first_offset == 50
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)
    assert log.append(batch(1)).first_offset == 0


def test_delete_records_before(tmp_path):
    log = open_log(tmp_path / "p")
    for _ in range(120):
        log.append(batch(2))
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(10)  # beyond the high watermark
    log.update_high_watermark(log.log_end_offset)
    segments = len(log.segments)
    assert log.delete_records_before(150) == 150
    assert len(log.segments) < segments
    with pytest.raises(OffsetOutOfRange):
        log.read(149, 100)
    assert all_records(log)[0].offset == 150
    log.close()
    assert open_log(tmp_path / "p").log_start_offset == 150


def test_leader_epochs_are_recorded_and_truncated(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch(2), leader_epoch=0)
    log.append(batch(2), leader_epoch=3)
    log.append(batch(2), leader_epoch=3)
    assert log.leader_epochs.entries == [(0, 0), (3, 2)]
    assert log.leader_epochs.end_offset_for(0, log.log_end_offset) == (0, 2)
    assert log.leader_epochs.end_offset_for(2, log.log_end_offset) == (0, 2)
    assert log.leader_epochs.end_offset_for(5, log.log_end_offset) == (3, 6)
    assert read_header(log.read(2, 100).read()).partition_leader_epoch == 3
    log.truncate_to(2)
    assert log.leader_epochs.entries == [(0, 0)]
    log.close()
    assert open_log(tmp_path / "p").leader_epochs.entries == [(0, 0)]


def test_flush_policy_moves_the_recovery_point(tmp_path):
    log = open_log(tmp_path / "p", LogConfig(segment_bytes=1 << 20, flush_messages=5))
    log.append(batch(3))
    assert log.recovery_point == 0
    log.append(batch(3))
    assert log.recovery_point == 6
    assert SMALL.flush_messages is None  # default: the OS decides


def test_a_replica_fetch_of_thousands_of_batches_appends_in_one_call(tmp_path):
    """A follower catching up appends one fetch response holding more batches than one
    pwritev may take (IOV_MAX); all land, in order, at the leader's offsets."""
    from data_plane.log.segment import IOV_MAX

    count = IOV_MAX * 2 + 7
    data = b"".join(
        RecordBatch(base_offset=i, records=(Record(i, 1, None, str(i).encode()),)).encode()
        for i in range(count)
    )
    log = open_log(tmp_path / "p", LogConfig(segment_bytes=64 * 2**20))
    assert log.append(data, assign_offsets=False).last_offset == count - 1
    assert [r.value for r in all_records(log)] == [str(i).encode() for i in range(count)]
    log.close()
    reopened = open_log(tmp_path / "p", LogConfig(segment_bytes=64 * 2**20))
    assert reopened.log_end_offset == count


def test_tail_reads_from_remembered_positions_match_a_fresh_log(tmp_path):
    """Reads at the tail start from positions remembered at append and at the end of the
    previous read; after a truncation (a follower cut back to its leader) and appends of
    different sizes, every read still returns what a read through the offset index alone
    (nothing remembered) returns."""
    log = open_log(tmp_path / "p", LogConfig(segment_bytes=1 << 20, index_interval_bytes=4096))
    position = 0

    def read_all_from(start: int) -> list[tuple[int, int, bytes]]:
        found = log.read(start, 1 << 20)
        remembered = [(dict(s._appended), dict(s._read_ends)) for s in log.segments]
        for segment in log.segments:
            segment._appended.clear()
            segment._read_ends.clear()
        fresh = log.read(start, 1 << 20)
        for segment, (appended, read_ends) in zip(log.segments, remembered, strict=True):
            segment._appended.update(appended)
            segment._read_ends.update(read_ends)
        assert (found is None) == (fresh is None)
        if found is None:
            return []
        assert (found.first_offset, found.next_offset, found.read()) == (
            fresh.first_offset,
            fresh.next_offset,
            fresh.read(),
        )
        return [(found.first_offset, found.next_offset, found.read())]

    for round_ in range(3):
        for i in range(40):
            log.append(batch(1 + (i + round_) % 3, size=10 + 7 * round_))
            if i % 4 == 0:  # a consumer at the tail, fetching every few appends
                for first, next_offset, _ in read_all_from(position):
                    assert first <= position < next_offset
                    position = next_offset
        for start in range(log.log_end_offset + 1):  # incl. offsets that began old batches
            read_all_from(start)
        log.flush()
        cut = log.log_end_offset - 25
        log.truncate_to(cut)  # positions remembered beyond the cut are gone with it
        position = min(position, log.log_end_offset)  # a cut mid-batch takes the batch
        for start in range(max(0, cut - 5), log.log_end_offset + 1):
            read_all_from(start)
    assert [r.offset for r in all_records(log)] == list(range(log.log_end_offset))
