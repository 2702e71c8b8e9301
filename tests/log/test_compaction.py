"""Compaction keeps the latest value per key, keeps offsets, handles tombstones and crashes."""

from __future__ import annotations

import dataclasses
import shutil

from data_plane.log.compaction import compact
from data_plane.log.config import LogConfig
from data_plane.log.partition import SWAP_SUFFIX
from tests.log.helpers import Clock, all_records, batch, open_log

DAY = 24 * 3600 * 1000
CONFIG = LogConfig(segment_bytes=600, compact=True, delete=False, delete_retention_ms=DAY)


def write_history(log, rounds=12):
    """Keys k0..k4 rewritten every round; each value names its round."""
    expected: dict[bytes, tuple[int, bytes]] = {}
    for r in range(rounds):
        keys = [f"k{i}".encode() for i in range(5)]
        values = [f"r{r}-k{i}".encode() for i in range(5)]
        info = log.append(batch(5, ts=r * 1000, keys=keys, values=values))
        for i, key in enumerate(keys):
            expected[key] = (info.first_offset + i, values[i])
    log.update_high_watermark(log.log_end_offset)
    return expected


def test_latest_value_per_key_survives_with_offsets_unchanged(tmp_path):
    clock = Clock(0)
    log = open_log(tmp_path / "p", CONFIG, clock)
    write_history(log)
    before = {r.offset: r for r in all_records(log)}
    result = compact(log, clock.now)
    assert result.records_removed > 0 and result.bytes_after < result.bytes_before
    after = all_records(log)
    # Every surviving record is byte-for-byte the record that had that offset.
    assert all(before[r.offset] == r for r in after)
    # In the cleaned (sealed) part, each key appears once: its latest value there.
    cleaned_end = log.segments[-1].base_offset
    sealed = [r for r in after if r.offset < cleaned_end]
    keys = [r.key for r in sealed]
    assert len(keys) == len(set(keys))
    # The latest value of every key is still readable, at its original offset.
    latest = {}
    for r in after:
        latest[r.key] = (r.offset, r.value)
    assert latest == {k: (o, v) for k, (o, v) in write_latest(before).items()}
    assert log.log_end_offset == 60
    assert log.append(batch(1, keys=[b"k"])).first_offset == 60


def write_latest(records_by_offset):
    latest = {}
    for offset in sorted(records_by_offset):
        r = records_by_offset[offset]
        latest[r.key] = (r.offset, r.value)
    return latest


def test_tombstones_are_kept_until_delete_retention_passes(tmp_path):
    clock = Clock(0)
    # Ratio 0: the second pass runs although nothing new was written (with Kafka's 0.5 the
    # tombstone goes at the first pass after the horizon that new writes make worthwhile).
    log = open_log(
        tmp_path / "p", dataclasses.replace(CONFIG, min_cleanable_dirty_ratio=0.0), clock
    )
    write_history(log, rounds=6)
    log.append(batch(1, ts=7000, keys=[b"k0"], values=[None]))  # delete k0
    write_history(log, rounds=0)
    for _ in range(10):  # push the tombstone into a sealed segment
        log.append(batch(5, ts=8000, keys=[b"x"] * 5))
    log.update_high_watermark(log.log_end_offset)
    compact(log, clock.now)
    k0 = [r for r in all_records(log) if r.key == b"k0"]
    assert [r.value for r in k0] == [None]  # only the tombstone is left
    clock.now = 7000 + DAY + 1
    compact(log, clock.now)
    assert not [r for r in all_records(log) if r.key == b"k0"]


def test_crash_after_swap_marker_completes_the_swap(tmp_path):
    clock = Clock(0)
    log = open_log(tmp_path / "p", CONFIG, clock)
    write_history(log)
    compact(log, clock.now)
    expected = all_records(log)
    # Simulate a crash between writing the .swap files and retiring the old segments:
    # restore a copy taken before compaction, then drop in the cleaned files as .swap.
    compacted_dir = tmp_path / "p"
    fresh = tmp_path / "fresh"
    log2 = open_log(fresh, CONFIG, clock)
    write_history(log2)
    uncompacted = all_records(log2)
    for segment in log2.segments:
        segment.close_files()
    base = log.segments[0].base_offset
    name = f"{base:020d}"
    end = log.segments[1].base_offset
    for suffix in (".index", ".timeindex", ".log"):
        shutil.copy(compacted_dir / f"{name}{suffix}", fresh / f"{name}{suffix}{SWAP_SUFFIX}")
    (fresh / f"{name}.end{SWAP_SUFFIX}").write_text(str(end))
    reopened = open_log(fresh, CONFIG, clock)
    # The first cleaned group replaced its range; everything after it is as it was.
    assert all_records(reopened) == [r for r in expected if r.offset < end] + [
        r for r in uncompacted if r.offset >= end
    ]
    assert not list(fresh.glob("*" + SWAP_SUFFIX))


def test_half_built_cleaning_is_discarded(tmp_path):
    clock = Clock(0)
    log = open_log(tmp_path / "p", CONFIG, clock)
    write_history(log)
    before = all_records(log)
    for segment in log.segments:
        segment.close_files()
    (tmp_path / "p" / "cleaning").mkdir()
    (tmp_path / "p" / "cleaning" / "junk.log").write_bytes(b"x")
    (tmp_path / "p" / f"{0:020d}.index{SWAP_SUFFIX}").write_bytes(b"")
    reopened = open_log(tmp_path / "p", CONFIG, clock)
    assert all_records(reopened) == before
    assert not (tmp_path / "p" / "cleaning").exists()


def test_bounded_offset_map_cleans_a_prefix(tmp_path):
    clock = Clock(0)
    log = open_log(tmp_path / "p", CONFIG, clock)
    for i in range(40):
        keys = [f"u{i}-{j}".encode() for j in range(5)]  # all distinct keys
        log.append(batch(5, keys=keys))
    log.update_high_watermark(log.log_end_offset)
    sealed = len(log.segments) - 1
    result = compact(log, clock.now, max_keys=30)
    assert 0 < result.segments_cleaned < sealed


def test_compaction_throttle_sleeps(tmp_path):
    clock = Clock(0)
    log = open_log(tmp_path / "p", CONFIG, clock)
    write_history(log)
    slept = []
    compact(log, clock.now, io_bytes_per_second=1000, sleep=slept.append)
    assert slept and sum(slept) > 0


def test_compact_and_delete_together(tmp_path):
    from data_plane.log.retention import apply_retention

    clock = Clock(0)
    config = LogConfig(segment_bytes=600, compact=True, delete=True, retention_ms=DAY)
    log = open_log(tmp_path / "p", config, clock)
    write_history(log)
    compact(log, clock.now)
    keys_after_compaction = {r.key for r in all_records(log)}
    assert keys_after_compaction == {f"k{i}".encode() for i in range(5)}
    clock.now = 12_000 + DAY + 1  # every record is now older than retention.ms
    apply_retention(log, clock.now)
    assert all_records(log) == []
    assert log.log_start_offset == log.log_end_offset == 60


def test_a_compacted_log_refuses_a_keyless_record_and_stores_nothing_of_its_batch(tmp_path):
    from data_plane.records.batch import InvalidRecordBatch

    log = open_log(tmp_path / "p", CONFIG, Clock(0))
    log.append(batch(2, keys=[b"a", b"b"]))
    try:
        log.append(batch(3, keys=[b"a", None, b"c"]))
    except InvalidRecordBatch as exc:
        assert (exc.reason, exc.record_index) == ("no_key", 1)
    else:
        raise AssertionError("a keyless record was accepted by a compacted log")
    assert log.log_end_offset == 2
    assert log.append(batch(2, keys=[b"a", b"b"])).first_offset == 2  # still usable


def test_the_cleaner_waits_for_the_dirty_ratio_and_the_compaction_lag(tmp_path):
    clock = Clock(0)
    log = open_log(tmp_path / "p", CONFIG, clock)
    write_history(log)
    first = compact(log, clock.now)
    assert first.segments_cleaned > 0  # everything was dirty
    assert compact(log, clock.now).segments_cleaned == 0  # nothing new: below the ratio
    # min.compaction.lag.ms: segments with records younger than the lag are left alone.
    young = open_log(
        tmp_path / "q", dataclasses.replace(CONFIG, min_compaction_lag_ms=10_000), clock
    )
    write_history(young)
    clock.now = min(s.max_timestamp for s in young.segments) + 5_000  # all too young
    assert compact(young, clock.now).segments_cleaned == 0
    clock.now = max(s.max_timestamp for s in young.segments) + 10_000  # all old enough
    assert compact(young, clock.now).segments_cleaned > 0


def _txn_batch(pid: int, seq: int, keys: list[bytes], values: list[bytes], ts: int = 1000) -> bytes:
    from data_plane.records import Record, RecordBatch

    return RecordBatch(
        base_offset=0,
        records=tuple(
            Record(i, ts, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))
        ),
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    ).encode()


def _marker(pid: int, commit: bool) -> bytes:
    from data_plane.log.transactions import ControlType, control_batch

    return control_batch(pid, 0, ControlType.COMMIT if commit else ControlType.ABORT, 0, 2000)


def test_compaction_drops_aborted_records_keeps_markers_and_stops_at_the_lso(tmp_path):
    """An aborted transaction's value never shadows the committed one, its records go,
    markers and the aborted-transaction index stay, and an open transaction's records
    (and everything after them) are not cleaned."""
    clock = Clock(0)
    log = open_log(tmp_path / "p", CONFIG, clock)
    log.append(_txn_batch(7, 0, [b"a", b"b"], [b"a-committed", b"b-committed"]))
    log.append(_marker(7, commit=True), markers=True)
    log.append(_txn_batch(8, 0, [b"a", b"c"], [b"a-aborted", b"c-aborted"]))
    log.append(_marker(8, commit=False), markers=True)
    for r in range(6):  # other keys, to roll segments past the transactions
        log.append(batch(5, ts=r, keys=[b"x%d" % i for i in range(5)]))
    open_first = log.log_end_offset
    log.append(_txn_batch(9, 0, [b"b"], [b"b-open"]))  # undecided: the LSO stops here
    for r in range(6):
        log.append(batch(5, ts=r, keys=[b"x%d" % i for i in range(5)]))
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == open_first
    aborted_before = log.aborted_transactions(0, log.log_end_offset)
    assert [t.producer_id for t in aborted_before] == [8]

    result = compact(log, clock.now)
    assert result.segments_cleaned > 0
    after = {r.offset: r for r in all_records(log)}
    values = [r.value for r in after.values()]
    assert b"a-committed" in values and b"b-committed" in values
    assert b"a-aborted" not in values and b"c-aborted" not in values
    assert b"b-open" in values  # above the LSO: untouched
    # Nothing at or past the LSO was rewritten: every x-record from there is still there.
    assert sum(1 for o in after if o >= open_first) == 1 + 30
    # Markers kept (offsets 2 and 5), and the abort still indexed for read_committed.
    headers = _headers(log)
    assert [h.base_offset for h in headers if h.is_control] == [2, 5]
    assert log.aborted_transactions(0, log.log_end_offset) == aborted_before
    # And after a restart (the cleaned segment's .txnindex was swapped in).
    for segment in log.segments:
        segment.close_files()
    reopened = open_log(tmp_path / "p", CONFIG, clock)
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == aborted_before


def _headers(log):
    from data_plane.records.batch import iter_batches

    found = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        found += list(iter_batches(data))
    return found
