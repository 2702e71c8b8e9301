"""Crash recovery: torn tails cut at every byte, corrupt data, missing indexes, clean opens."""

from __future__ import annotations

import os

import pytest

from data_plane.log.config import LogConfig
from data_plane.log.partition import CLEAN_SHUTDOWN
from tests.log.helpers import all_records, batch, open_log

BIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=128)


def crash(log):
    """Drop the log as a crash would: no flush of state, no clean-shutdown marker."""
    for segment in log.segments:
        segment.close_files()


def build(path, batches=6, config=BIG):
    log = open_log(path, config)
    sizes = [
        len(log.read(log.append(batch(3, size=40)).first_offset, 1 << 20).read())
        for _ in range(batches)
    ]
    active = log.segments[-1].log_path
    crash(log)
    return active, sizes


def test_cut_at_every_byte_of_the_last_batch(tmp_path):
    source = tmp_path / "source"
    active, _ = build(source)
    full = active.read_bytes()
    last_batch_size = len(batch(3, size=40))
    start = len(full) - last_batch_size
    for cut in range(start, len(full) + 1):
        work = tmp_path / f"cut-{cut}"
        work.mkdir()
        for f in source.iterdir():
            if f.is_file():
                (work / f.name).write_bytes(f.read_bytes())
        (work / active.name).write_bytes(full[:cut])
        log = open_log(work, BIG)
        complete = 6 if cut == len(full) else 5
        assert log.log_end_offset == complete * 3, cut
        assert [r.offset for r in all_records(log)] == list(range(complete * 3))
        assert log.recovered_bytes_cut == (0 if cut in (start, len(full)) else cut - start)
        assert log.append(batch(1)).first_offset == complete * 3  # offsets continue
        log.close()


@pytest.mark.parametrize("where", ["header", "records"])
def test_corruption_in_the_middle_cuts_from_there(tmp_path, where):
    active, _ = build(tmp_path / "p")
    data = bytearray(active.read_bytes())
    size = len(batch(3, size=40))
    data[2 * size + (30 if where == "header" else 70)] ^= 0x55  # inside the third batch
    active.write_bytes(bytes(data))
    log = open_log(tmp_path / "p", BIG)
    assert log.log_end_offset == 6
    assert [r.offset for r in all_records(log)] == list(range(6))


def test_missing_or_garbage_index_is_rebuilt(tmp_path):
    active, _ = build(tmp_path / "p")
    active.with_suffix(".index").unlink()
    active.with_suffix(".timeindex").write_bytes(b"\xff" * 12 * 9)
    log = open_log(tmp_path / "p", BIG)
    assert len(log.segments[-1].index) > 1
    assert log.read(10, 1 << 20).first_offset == 9
    assert log.offset_for_timestamp(1_000_001).offset == 1


def test_clean_open_reads_no_data_and_a_crash_scans_only_the_unflushed_tail(tmp_path):
    path = tmp_path / "p"
    log = open_log(path, LogConfig(segment_bytes=600, index_interval_bytes=128))
    for _ in range(12):
        log.append(batch(3, size=40))
    assert len(log.segments) >= 3
    log.close()
    assert (path / CLEAN_SHUTDOWN).exists()
    log = open_log(path, LogConfig(segment_bytes=600, index_interval_bytes=128))
    assert log.opened_cleanly and not (path / CLEAN_SHUTDOWN).exists()
    end = log.log_end_offset
    first = log.segments[0].log_path
    crash(log)
    # Damage a flushed (sealed, below the recovery point) segment: recovery must not even
    # look at it, which is what makes recovery cost independent of the log's size.
    data = bytearray(first.read_bytes())
    data[-5] ^= 0xFF
    first.write_bytes(bytes(data))
    log = open_log(path, LogConfig(segment_bytes=600, index_interval_bytes=128))
    assert not log.opened_cleanly
    assert log.log_end_offset == end
    assert log.recovered_bytes_cut == 0


def test_leftovers_of_deletes_are_removed_on_open(tmp_path):
    log = open_log(tmp_path / "p")
    for _ in range(100):
        log.append(batch(2))
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(150)
    deleted = [p for p in (tmp_path / "p").iterdir() if p.name.endswith(".deleted")]
    assert deleted
    crash(log)
    open_log(tmp_path / "p")
    assert not [p for p in (tmp_path / "p").iterdir() if p.name.endswith(".deleted")]
    assert os.path.exists(tmp_path / "p" / "log-start-offset")


def test_a_new_epoch_is_written_with_the_log_flush_and_recovered_from_the_batches(
    tmp_path, monkeypatch
):
    """An append that starts an epoch does not touch the disk: the leader-epoch file is
    written (atomically, fsynced) by the log's flush or roll, as Kafka does since
    KAFKA-15046. After a crash before any flush, recovery takes the epochs from the
    batches past the recovery point."""
    from data_plane.log.checkpoint import LeaderEpochCache

    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    log = open_log(tmp_path / "t-0", BIG)
    log.append(batch(2), leader_epoch=3)
    log.append(batch(2), leader_epoch=5)
    assert synced == []
    assert LeaderEpochCache(log.leader_epochs.path).entries == []  # not written yet
    log.flush()
    assert LeaderEpochCache(log.leader_epochs.path).entries == [(3, 0), (5, 2)]
    assert len(synced) >= 3  # the segment, then the epoch file and its directory
    before = len(synced)
    log.leader_epochs.flush()
    assert len(synced) == before  # nothing new to sync
    log.append(batch(2), leader_epoch=7)  # never flushed: only in the batch
    crash(log)
    assert LeaderEpochCache(log.leader_epochs.path).entries == [(3, 0), (5, 2)]
    again = open_log(tmp_path / "t-0", BIG)
    assert again.leader_epochs.entries == [(3, 0), (5, 2), (7, 4)]
    assert again.leader_epochs.end_offset_for(5, again.log_end_offset) == (5, 4)
    again.close()
    assert open_log(tmp_path / "t-0", BIG).leader_epochs.entries == [(3, 0), (5, 2), (7, 4)]


def test_a_roll_writes_the_epochs_below_the_new_recovery_point(tmp_path):
    """A roll moves the recovery point past the sealed segment, whose batches recovery
    will not read again: their epochs are written with it."""
    from data_plane.log.checkpoint import LeaderEpochCache

    log = open_log(tmp_path / "t-0", BIG)
    log.append(batch(2), leader_epoch=2)
    log.roll()
    assert LeaderEpochCache(log.leader_epochs.path).entries == [(2, 0)]
    log.append(batch(2), leader_epoch=4)
    crash(log)
    assert open_log(tmp_path / "t-0", BIG).leader_epochs.entries == [(2, 0), (4, 2)]
