"""Idempotent producers: retries are not appended twice; gaps and stale epochs are refused."""

from __future__ import annotations

import pytest

from data_plane.log.producer_state import (
    ActiveProducer,
    OutOfOrderSequence,
    ProducerFenced,
    ProducerStateManager,
)
from data_plane.records import Record, RecordBatch
from tests.log.helpers import all_records, open_log


def idempotent(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    return RecordBatch(
        base_offset=0,
        records=tuple(Record(i, 1000, None, f"{seq + i}".encode()) for i in range(n)),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    ).encode()


def test_retry_of_a_recent_batch_returns_the_original_offset(tmp_path):
    log = open_log(tmp_path / "p")
    first = log.append(idempotent(7, 0, 0))
    second = log.append(idempotent(7, 0, 2))
    retry = log.append(idempotent(7, 0, 0))  # the producer never saw the first ack
    assert retry.duplicate and retry.first_offset == first.first_offset == 0
    assert second.first_offset == 2
    assert log.log_end_offset == 4
    assert [r.value for r in all_records(log)] == [b"0", b"1", b"2", b"3"]


def test_sequence_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 0, 0))
    with pytest.raises(OutOfOrderSequence):
        log.append(idempotent(7, 0, 5))
    assert log.log_end_offset == 2


def test_epochs_fence_and_restart_sequences(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 1, 0))
    with pytest.raises(ProducerFenced):
        log.append(idempotent(7, 0, 2))
    with pytest.raises(OutOfOrderSequence):
        log.append(idempotent(7, 2, 4))  # a new epoch must start at 0
    assert log.append(idempotent(7, 2, 0)).first_offset == 2


def test_producers_are_independent_and_non_idempotent_batches_pass(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(1, 0, 0))
    log.append(idempotent(2, 0, 0))
    plain = RecordBatch(base_offset=0, records=(Record(0, 1, None, b"x"),)).encode()
    log.append(plain)
    log.append(plain)  # no producer id: no duplicate detection
    assert log.log_end_offset == 6


def test_truncation_forgets_removed_batches(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 0, 0))
    log.append(idempotent(7, 0, 2))
    log.truncate_to(2)
    # The batch at sequence 2 is gone, so sending it again appends it (not a duplicate).
    info = log.append(idempotent(7, 0, 2))
    assert not info.duplicate and info.first_offset == 2


def snapshots(path):
    return sorted(p.name for p in path.glob("*.snapshot"))


def test_retry_after_a_clean_restart_is_still_a_duplicate(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 1, 0))
    log.append(idempotent(7, 1, 2))
    log.close()
    assert snapshots(tmp_path / "p") == ["00000000000000000004.snapshot"]
    log = open_log(tmp_path / "p")
    retry = log.append(idempotent(7, 1, 2))
    assert retry.duplicate and retry.first_offset == 2
    with pytest.raises(OutOfOrderSequence):
        log.append(idempotent(7, 1, 9))
    with pytest.raises(ProducerFenced):
        log.append(idempotent(7, 0, 4))
    assert log.append(idempotent(7, 1, 4)).first_offset == 4


def test_crash_replays_the_batches_after_the_newest_snapshot(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 0, 0))
    log.roll()  # a snapshot at offset 2
    log.append(idempotent(7, 0, 2))
    log.append(idempotent(8, 0, 0))
    log.flush()
    assert snapshots(tmp_path / "p") == ["00000000000000000002.snapshot"]
    # No close: a crash. The snapshot knows producer 7 up to sequence 1; the replay of the
    # active segment adds its batch at sequence 2 and producer 8.
    log = open_log(tmp_path / "p")
    assert log.append(idempotent(7, 0, 2)).duplicate
    assert log.append(idempotent(8, 0, 0)).duplicate
    assert log.append(idempotent(7, 0, 0)).duplicate  # remembered from the snapshot
    assert log.log_end_offset == 6


def test_unreadable_snapshot_falls_back_to_replaying_the_active_segment(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 0, 0))
    log.close()
    (tmp_path / "p" / "00000000000000000002.snapshot").write_bytes(b"\x00torn")
    log = open_log(tmp_path / "p")
    assert log.append(idempotent(7, 0, 0)).duplicate
    assert snapshots(tmp_path / "p") == []  # the torn one is gone


def test_snapshots_past_a_truncation_point_are_dropped(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 0, 0))
    log.roll()  # snapshot at 2
    log.append(idempotent(7, 0, 2))
    log.roll()  # snapshot at 4
    log.append(idempotent(7, 0, 4))
    log.roll()  # snapshot at 6; only the newest two are kept
    assert snapshots(tmp_path / "p") == [
        "00000000000000000004.snapshot",
        "00000000000000000006.snapshot",
    ]
    log.truncate_to(3)
    assert snapshots(tmp_path / "p") == []
    log.close()
    log = open_log(tmp_path / "p")
    # The batch at sequence 2 was cut, so it is appended again, not a duplicate.
    info = log.append(idempotent(7, 0, 2))
    assert not info.duplicate and info.first_offset == 2


def test_active_producers_survive_restarts_with_their_last_timestamp(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(idempotent(7, 2, 0, n=3))
    log.append(idempotent(9, 0, 0))
    expected = [ActiveProducer(7, 2, 2, 1000), ActiveProducer(9, 0, 1, 1000)]
    assert log.active_producers() == expected
    log.close()  # a clean shutdown writes a snapshot, kept with the timestamp
    reopened = open_log(tmp_path / "p")
    assert reopened.active_producers() == expected
    reopened.close()


def test_a_snapshot_from_before_timestamps_were_kept_still_loads():
    old = b'{"7":[2,4,[[0,4,10]]]}'
    state = ProducerStateManager.from_json(old)
    assert state.active() == [ActiveProducer(7, 2, 4, -1)]
