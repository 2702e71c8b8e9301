"""The codec core: primitives, framing, headers, and ApiVersions/Metadata against kafka-python."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.protocol.framing import FrameReader, FrameTooLarge, frame
from data_plane.protocol.headers import (
    read_request_header,
    request_header_version,
    response_header_version,
    write_request_header,
)
from data_plane.protocol.messages import APIS, api_versions, metadata
from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT32, STRING, ProtocolError
from tests.protocol.oracle import cross_check


@pytest.mark.parametrize("api", sorted(APIS.values(), key=lambda a: a.key), ids=lambda a: a.name)
@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_every_version_agrees_with_kafka_python(api, nulls):
    for version in range(api.min_version, api.max_version + 1):
        cross_check(api.request, version, nulls=nulls)
        cross_check(api.response, version, nulls=nulls)


def test_flexible_metadata_uses_compact_encodings():
    body = metadata.REQUEST.encode({"topics": [{"name": "orders"}]}, 9)
    # topics (compact array of 1) | name (compact string) | struct tags | auto-create |
    # include cluster ops (v8-10) | include topic ops | message tags
    assert body.hex() == "02" "076f7264657273" "00" "01" "00" "00" "00"  # fmt: skip
    classic = metadata.REQUEST.encode({"topics": [{"name": "orders"}]}, 4)
    assert classic.hex() == "00000001" "0006" "6f7264657273" "01"  # fmt: skip


def test_tagged_fields_round_trip_and_unknown_tags_are_skipped():
    data = {
        "error_code": 0,
        "api_keys": [],
        "throttle_time_ms": 0,
        "finalized_features_epoch": 7,
        "supported_features": [],
        "finalized_features": [],
    }
    raw = api_versions.RESPONSE.encode(data, 3)
    assert api_versions.RESPONSE.decode(raw, 3)["finalized_features_epoch"] == 7
    # A newer peer may add tags we do not know: replace the tag section (count 1, tag 1,
    # size 8, value) with one that also carries tag 9, and the known tag still decodes.
    tags = raw[-11:]
    assert tags[:3] == bytes([1, 1, 8])  # one tagged field: tag 1, 8 bytes
    with_unknown = raw[:-11] + bytes([2]) + tags[1:] + bytes([9, 2, 0xAB, 0xCD])
    assert api_versions.RESPONSE.decode(with_unknown, 3)["finalized_features_epoch"] == 7


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00\x05abc",
        b"\xff\xff\xff\xff",
        b"\x7f\xff\xff\xff",
        b"\x00\x00\x00\x01\xff\xff",
    ],
)
def test_malformed_classic_bodies_raise_protocol_error(raw):
    with pytest.raises(ProtocolError):
        metadata.REQUEST.decode(raw, 4)


def test_array_count_is_bounded_by_the_frame():
    # Claims 2**31-1 topics in a 6-byte frame: rejected before any list is built.
    with pytest.raises(ProtocolError, match="cannot fit"):
        metadata.REQUEST.decode(b"\x7f\xff\xff\xff\x00\x00", 1)


TOY = message(
    99,
    "Toy",
    "request",
    (0, 1),
    (1, None),
    Field("name", STRING, nullable=(0, None)),
    Field("items", Array(Struct(Field("n", INT32)))),
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([0, 1]))
def test_random_bytes_never_escape_as_anything_but_protocol_error(raw, version):
    try:
        TOY.decode(raw, version)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.none(), st.text(max_size=20)),
    st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=5),
    st.sampled_from([0, 1]),
)
def test_toy_round_trip(name, ns, version):
    data = {"name": name, "items": [{"n": n} for n in ns]}
    assert TOY.decode(TOY.encode(data, version), version) == data


def test_frame_reader_checks_size_before_buffering_the_body():
    reader = FrameReader(max_frame_bytes=512 * 1024)
    with pytest.raises(FrameTooLarge):
        reader.feed(b"\x7f\xff\xff\xff")  # 2 GiB announced: refused at once
    reader = FrameReader(max_frame_bytes=100)
    reader.feed(frame(b"abc")[:3])
    assert reader.next_frame() is None
    reader.feed(frame(b"abc")[3:] + frame(b"de"))
    assert reader.next_frame() == b"abc"
    assert reader.next_frame() == b"de"
    assert reader.next_frame() is None
    with pytest.raises(ProtocolError):
        FrameReader(100).feed(b"\xff\xff\xff\xfe")


@pytest.mark.parametrize("version", [1, 2])
def test_request_header_round_trip(version):
    raw = write_request_header(3, 12, 77, "rdkafka", version) + b"BODY"
    header = read_request_header(raw, version)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        77,
        "rdkafka",
    )
    assert raw[header.size :] == b"BODY"


def test_header_versions():
    assert request_header_version(flexible=True) == 2
    assert request_header_version(flexible=False) == 1
    assert response_header_version(18, flexible=True) == 0  # ApiVersions is special
    assert response_header_version(3, flexible=True) == 1
    assert response_header_version(3, flexible=False) == 0
