"""Zig-zag and unsigned varints: known encodings and property-based round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_plane.records.varint import (
    VarintError,
    read_uvarint,
    read_varint,
    read_varint32,
    varint_size,
    write_uvarint,
    write_varint,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_known_zigzag_encodings(value, encoded):
    out = bytearray()
    write_varint(value, out)
    assert out.hex() == encoded
    assert read_varint(bytes(out), 0) == (value, len(out))
    assert varint_size(value) == len(out)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(value):
    out = bytearray()
    write_varint(value, out)
    assert read_varint(bytes(out) + b"\xff", 0) == (value, len(out))
    assert varint_size(value) == len(out)


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint32_round_trip(value):
    out = bytearray()
    write_varint(value, out)
    assert read_varint32(bytes(out), 0) == (value, len(out))


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_uvarint_round_trip(value):
    out = bytearray()
    write_uvarint(value, out)
    assert read_uvarint(bytes(out), 0) == (value, len(out))


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xff\xff", b"\xff" * 11, b"\xff" * 9 + b"\x02"])
def test_truncated_or_overlong_varints_raise(raw):
    with pytest.raises(VarintError):
        read_varint(raw, 0)


def test_varint32_rejects_values_beyond_32_bits():
    out = bytearray()
    write_varint(2**31, out)
    with pytest.raises(VarintError):
        read_varint32(bytes(out), 0)


def test_out_of_range_inputs_raise():
    with pytest.raises(VarintError):
        write_varint(2**63, bytearray())
    with pytest.raises(VarintError):
        write_uvarint(-1, bytearray())
