"""Transactions in the partition log (Step 13): where each producer's transaction starts
and ends, the last stable offset, and the aborted-transaction index of each segment,
across restarts, crashes and truncation."""

from __future__ import annotations

import struct

import pytest

from data_plane.log.producer_state import CoordinatorFenced, ProducerFenced, ProducerStateManager
from data_plane.log.transactions import (
    ENTRY_SIZE,
    AbortedTxn,
    ControlType,
    control_batch,
    control_marker,
    control_type,
)
from data_plane.records import Record, RecordBatch
from tests.log.helpers import batch, open_log

COMMIT, ABORT = ControlType.COMMIT, ControlType.ABORT


def txn(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return RecordBatch(
        base_offset=0,
        records=tuple(Record(i, 1000, None, b"t%d" % (seq + i)) for i in range(n)),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    ).encode()


def marker(pid: int, kind: ControlType, epoch: int = 0, coordinator_epoch: int = 3) -> bytes:
    return control_batch(pid, epoch, kind, coordinator_epoch=coordinator_epoch, timestamp=2000)


def test_a_control_batch_says_whether_it_commits_or_aborts():
    assert control_type(marker(7, COMMIT)) is COMMIT
    assert control_type(marker(7, ABORT)) is ABORT
    decoded = RecordBatch.decode(marker(7, ABORT))
    assert decoded.is_control and decoded.is_transactional
    (record,) = decoded.records
    assert struct.unpack(">hh", record.key) == (0, 0)
    assert struct.unpack(">hi", record.value) == (0, 3)  # version, coordinator epoch


def test_the_last_stable_offset_waits_for_open_transactions_and_their_markers(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch(2))  # 0-1: not transactional
    log.append(txn(7, 0))  # 2-3: producer 7's transaction starts at 2
    log.append(batch(1))  # 4
    log.append(txn(8, 0))  # 5-6: producer 8's starts at 5
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    log.append(marker(7, COMMIT), markers=True)  # 7
    assert log.last_stable_offset == 2  # the marker is not below the high watermark yet
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 5  # producer 8's transaction is still open
    log.append(marker(8, ABORT), markers=True)  # 8
    log.update_high_watermark(8)
    assert log.last_stable_offset == 5
    log.update_high_watermark(9)
    assert log.last_stable_offset == 9 == log.high_watermark
    # Only the abort is indexed: (producer, first offset, marker, LSO once it was in).
    assert log.aborted_transactions(0, 9) == [AbortedTxn(8, 5, 8, 9)]
    assert log.aborted_transactions(7, 9) == [AbortedTxn(8, 5, 8, 9)]  # overlaps the read
    assert log.aborted_transactions(9, 20) == []  # wholly before it


def test_a_marker_without_a_transaction_here_changes_nothing(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch(1))
    log.append(marker(9, ABORT), markers=True)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    assert log.aborted_transactions(0, 10) == []


def test_the_index_file_has_kafkas_layout_and_survives_a_clean_restart(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(txn(7, 0, n=3))  # 0-2
    log.append(marker(7, ABORT), markers=True)  # 3
    log.append(txn(7, 3, n=1))  # 4: its next transaction, still open
    (path,) = (tmp_path / "p").glob("*.txnindex")
    data = path.read_bytes()
    assert len(data) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", data) == (0, 7, 0, 3, 4)  # LSO: 4, the open one
    log.close()
    log = open_log(tmp_path / "p")
    log.update_high_watermark(log.log_end_offset)
    assert log.aborted_transactions(0, 5) == [AbortedTxn(7, 0, 3, 4)]
    assert log.last_stable_offset == 4  # the open transaction came back with the snapshot


@pytest.mark.parametrize("index_lost", [False, True])
def test_a_crash_rebuilds_open_transactions_and_the_index_from_the_log(tmp_path, index_lost):
    log = open_log(tmp_path / "p")
    log.append(txn(7, 0))  # 0-1
    log.roll()  # a snapshot at 2, with producer 7's transaction open from 0
    log.append(txn(8, 0))  # 2-3
    log.append(marker(7, ABORT), markers=True)  # 4
    log.append(txn(9, 0))  # 5-6
    log.flush()
    if index_lost:  # the replay finds the abort again; if kept, it is not indexed twice
        for path in (tmp_path / "p").glob("*.txnindex"):
            path.unlink()
    log = open_log(tmp_path / "p")  # no close: a crash
    log.update_high_watermark(log.log_end_offset)
    assert log.aborted_transactions(0, 7) == [AbortedTxn(7, 0, 4, 2)]  # 8's was open (2)
    assert log.last_stable_offset == 2
    log.append(marker(8, COMMIT), markers=True)
    log.append(marker(9, COMMIT), markers=True)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset


def test_truncation_below_a_marker_opens_its_transaction_again(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(txn(7, 0))  # 0-1
    log.append(marker(7, ABORT), markers=True)  # 2
    log.append(batch(1))  # 3
    assert log.aborted_transactions(0, 4) == [AbortedTxn(7, 0, 2, 3)]
    log.truncate_to(2)  # a follower cut back below the marker
    log.update_high_watermark(log.log_end_offset)
    assert log.aborted_transactions(0, 4) == []
    assert log.last_stable_offset == 0  # producer 7's transaction is open again
    log.append(marker(7, COMMIT), markers=True)  # the new leader's decision
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 3
    assert log.aborted_transactions(0, 4) == []


def test_an_open_transaction_is_kept_in_producer_snapshots():
    state = ProducerStateManager()
    state.record(7, 0, 0, 1, 10, transactional=True)
    state.record(8, 0, 0, 1, 12)
    again = ProducerStateManager.from_json(state.to_json())
    assert again.first_unstable_offset() == 10
    assert again.end_transaction(7) == 10
    assert again.first_unstable_offset() is None


def test_truncation_after_a_restart_with_a_transaction_open_replays(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch(1))  # 0
    log.append(txn(7, 0))  # 1-2, left open
    log.close()  # the snapshot holds the open transaction; nothing is replayed on open
    log = open_log(tmp_path / "p")
    log.append(batch(1))  # 3
    log.truncate_to(1)  # cuts the open transaction's batches
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 1


def test_the_last_stable_offset_is_never_below_the_log_start(tmp_path):
    """DeleteRecords (or retention) past an open transaction's first record: readers are
    held at the log start, not at an offset that no longer exists (as Kafka does)."""
    log = open_log(tmp_path / "p")
    log.append(batch(2))  # 0-1
    log.append(txn(7, 0))  # 2-3: open
    log.append(batch(2))  # 4-5
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    log.delete_records_before(3)
    assert log.log_start_offset == 3
    assert log.last_stable_offset == 3
    log.append(marker(7, COMMIT), markers=True)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.high_watermark == 7


def test_a_deposed_coordinators_late_marker_cannot_end_the_next_transaction(tmp_path):
    """Coordinator epoch 4 committed producer 7's first transaction here; the producer's
    next one is open. A marker of the first transaction from the deposed coordinator
    (epoch 3) arrives late: refused, the open transaction stays open, nothing written.
    Kept across a restart (snapshot) and a crash (replay of the markers)."""
    assert control_marker(marker(7, COMMIT, coordinator_epoch=4)) == (COMMIT, 4)
    log = open_log(tmp_path / "p")
    log.append(txn(7, 0))  # 0-1
    log.append(marker(7, COMMIT, coordinator_epoch=4), markers=True)  # 2
    log.append(txn(7, 2))  # 3-4: the next transaction
    end = log.log_end_offset
    with pytest.raises(CoordinatorFenced):
        log.append(marker(7, COMMIT, coordinator_epoch=3), markers=True)
    assert log.log_end_offset == end
    log.update_high_watermark(end)
    assert log.last_stable_offset == 3  # still open
    log.append(marker(7, ABORT, coordinator_epoch=4), markers=True)  # the same coordinator
    log.update_high_watermark(log.log_end_offset)
    assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 3, 5, 6)]
    log.close()
    for reopened in (open_log(tmp_path / "p"), _crashed(tmp_path / "p")):
        reopened.append(txn(7, 4))
        with pytest.raises(CoordinatorFenced):
            reopened.append(marker(7, ABORT, coordinator_epoch=3), markers=True)
        reopened.close()


def _crashed(directory):
    """The log reopened as after a crash: no producer snapshot, the segments replayed."""
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    return open_log(directory)


def test_a_marker_at_an_older_producer_epoch_is_fenced_and_a_newer_one_fences(tmp_path):
    """The coordinator aborts a fenced producer's transaction at the bumped epoch: the
    partition takes that epoch, so the old instance's batches are refused; a marker at an
    epoch older than the partition's is refused too. The new instance starts at 0."""
    log = open_log(tmp_path / "p")
    log.append(txn(7, 0, epoch=2))
    log.append(marker(7, ABORT, epoch=3), markers=True)  # fenced at 3 and aborted
    with pytest.raises(ProducerFenced):
        log.append(txn(7, 2, epoch=2))  # the zombie
    with pytest.raises(ProducerFenced):
        log.append(marker(7, COMMIT, epoch=2), markers=True)
    log.append(txn(7, 0, epoch=3))  # the next instance at the bumped epoch, sequence 0
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 3
