"""LazyBatch against the full decode: the same records read and matched, for every codec,
contiguous batches and batches with gaps (after compaction), any range and any limit."""

from __future__ import annotations

import random

import pytest

from data_plane.records.batch import InvalidRecordBatch, Record, RecordBatch, RecordHeader
from data_plane.records.compression import Compression
from data_plane.records.filter import RecordFilter
from data_plane.records.lazy import LazyBatch


def _records(base: int, offsets: list[int], rng: random.Random) -> tuple[Record, ...]:
    words = [b"apple", b"needle", b"ne", b"edle", b"x" * 200, b"\xff\x00", b""]
    out = []
    for o in offsets:
        key = None if o % 7 == 0 else rng.choice(words) + str(o).encode()
        value = None if o % 11 == 0 else b"".join(rng.choice(words) for _ in range(3))
        headers = tuple(
            RecordHeader(rng.choice(["trace", "needle-h", "ne"]), rng.choice([None, *words]))
            for _ in range(rng.randrange(3))
        )
        out.append(Record(o, 1_000 + o, key, value, headers))
    return tuple(out)


def _oracle(records: tuple[Record, ...], lo: int, hi: int, limit: int, flt: RecordFilter):
    """Full decode, then the filter written out again, independently of RecordFilter."""
    read = [r for r in records if lo <= r.offset < hi][:limit]

    def hit(r: Record) -> bool:
        if flt.key and flt.key not in (r.key or b""):
            return False
        if not flt.text:
            return True
        return flt.text in (r.value or b"") or any(
            flt.text in h.key.encode() or flt.text in (h.value or b"") for h in r.headers
        )

    return len(read), (read[-1].offset if read else -1), [r for r in read if hit(r)]


FILTERS = [
    RecordFilter(),
    RecordFilter(text=b"needle"),
    RecordFilter(key=b"needle"),
    RecordFilter(key=b"apple", text=b"edle"),
    RecordFilter(text=b"nowhere"),
    RecordFilter(text=b"needle-h"),  # header names only
    RecordFilter(text=b"\xff"),
    RecordFilter(text=b"eedlen"),  # only ever across two fields
]


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("gaps", [False, True])
def test_select_reads_and_matches_what_the_full_decode_does(codec, gaps):
    rng = random.Random(f"{codec}-{gaps}")
    base = 100
    offsets = list(range(base, base + 60))
    if gaps:  # compaction removed some records; the last offset stays
        offsets = [o for o in offsets if o % 3 or o == base + 59]
    records = _records(base, offsets, rng)
    data = RecordBatch(base, records, compression=codec, last_offset_delta=59).encode()
    full = RecordBatch.decode(data).records
    assert full == records
    for _ in range(40):
        lo = rng.randrange(base - 5, base + 62)
        hi = rng.randrange(lo, base + 70)
        limit = rng.choice([1, 5, 100])
        lazy = LazyBatch.open(data)  # fresh: nothing walked yet
        for flt in FILTERS:
            assert lazy.select(lo, hi, limit, flt) == _oracle(records, lo, hi, limit, flt)


def test_a_batch_without_the_needle_is_counted_without_walking_its_records():
    records = tuple(Record(o, 0, b"k", b"v" * 50) for o in range(10))
    lazy = LazyBatch.open(RecordBatch(0, records).encode())
    assert lazy.select(2, 8, 100, RecordFilter(text=b"zzz")) == (6, 7, [])
    assert lazy._starts == [0]  # no record boundary was read


def test_a_corrupt_record_is_refused():
    records = (Record(0, 0, b"k", b"needle"), Record(1, 0, b"k", b"v"))
    data = bytearray(RecordBatch(0, records).encode())
    batch = LazyBatch.open(bytes(data))
    # Claim a longer first record than the section holds.
    body = bytearray(batch.body)
    body[0] = 0x7E
    broken = LazyBatch(batch.header, bytes(body))
    with pytest.raises(InvalidRecordBatch):
        broken.select(0, 2, 2, RecordFilter(text=b"needle"))


def test_a_needle_across_two_fields_is_in_the_bytes_but_matches_nothing():
    records = (Record(0, 0, b"ab", b"cd"), Record(1, 0, b"xab", b"b\x04c"))
    lazy = LazyBatch.open(RecordBatch(0, records).encode())
    needle = b"b\x04c"  # the key's end, the value's length varint, the value's start
    assert needle in lazy.body
    assert lazy.select(0, 2, 10, RecordFilter(text=needle)) == (2, 1, [records[1]])
    assert lazy.select(0, 2, 10, RecordFilter(key=needle)) == (2, 1, [])
