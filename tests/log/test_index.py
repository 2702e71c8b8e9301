"""Offset and time indexes: lookups at and between entries, truncate, trim and reopen."""

from __future__ import annotations

import pytest

from data_plane.log.index import IndexFullError, OffsetIndex, TimeIndex


@pytest.fixture
def offset_index(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 100, max_bytes=80, writable=True)
    for rel, pos in [(0, 0), (10, 400), (20, 900), (35, 1500)]:
        index.append(100 + rel, pos)
    return index


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (100, (100, 0)),
        (105, (100, 0)),
        (110, (110, 400)),
        (119, (110, 400)),
        (120, (120, 900)),
        (134, (120, 900)),
        (135, (135, 1500)),
        (10_000, (135, 1500)),
        (50, (100, 0)),
    ],
)
def test_offset_lookup_at_and_between_entries(offset_index, offset, expected):
    assert offset_index.lookup(offset) == expected


def test_offset_index_is_preallocated_then_trimmed(tmp_path, offset_index):
    assert (tmp_path / "x.index").stat().st_size == 80
    offset_index.trim_and_close()
    assert (tmp_path / "x.index").stat().st_size == 4 * 8
    reopened = OffsetIndex(tmp_path / "x.index", 100, max_bytes=80, writable=False)
    assert len(reopened) == 4
    assert reopened.lookup(125) == (120, 900)
    assert reopened.last_entry() == (135, 1500)


def test_offset_index_truncate(offset_index):
    offset_index.truncate_to_offset(120)
    assert len(offset_index) == 2
    assert offset_index.lookup(130) == (110, 400)
    offset_index.append(120, 950)  # appends continue after truncation
    assert offset_index.lookup(130) == (120, 950)


def test_offset_index_full_and_non_increasing(tmp_path):
    index = OffsetIndex(tmp_path / "y.index", 0, max_bytes=16, writable=True)
    index.append(0, 0)
    index.append(0, 10)  # not increasing: ignored
    index.append(5, 100)
    assert len(index) == 2 and index.is_full
    with pytest.raises(IndexFullError):
        index.append(9, 200)


def test_empty_index_lookups(tmp_path):
    index = OffsetIndex(tmp_path / "e.index", 42, max_bytes=80, writable=True)
    assert index.lookup(50) == (42, 0)
    times = TimeIndex(tmp_path / "e.timeindex", 42, max_bytes=120, writable=True)
    assert times.lookup(5) == (-1, 42)
    assert times.max_timestamp() == -1


def test_time_index_lookup_and_monotonic(tmp_path):
    times = TimeIndex(tmp_path / "t.timeindex", 0, max_bytes=120, writable=True)
    for ts, off in [(1000, 0), (900, 5), (1500, 10), (2000, 20)]:
        times.append(ts, off)
    assert len(times) == 3  # 900 is not a new maximum
    assert times.lookup(1000) == (-1, 0)  # nothing strictly earlier: scan from the start
    assert times.lookup(1001) == (1000, 0)
    assert times.lookup(1800) == (1500, 10)
    assert times.lookup(99_999) == (2000, 20)
    assert times.max_timestamp() == 2000
    times.truncate_to_offset(10)
    assert times.max_timestamp() == 1000
