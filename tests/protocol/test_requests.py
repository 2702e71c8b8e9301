"""Request parsing and response framing, using kafka-python's own request encoder."""

from __future__ import annotations

import struct

import pytest

from data_plane.protocol.compat import main as compat_main
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import APIS
from data_plane.protocol.requests import (
    Unsupported,
    encode_response,
    parse_request,
    unsupported_version_response,
)
from data_plane.protocol.types import ProtocolError


def test_parse_a_kafka_python_request_with_its_header():
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(
        version=12,
        topics=[MetadataRequest.MetadataRequestTopic(version=12, name="orders")],
        allow_auto_topic_creation=False,
    )
    request.with_header(correlation_id=42, client_id="kafka-python-test")
    frame = request.encode(version=12, header=True)
    parsed = parse_request(frame)
    assert (parsed.api.name, parsed.version, parsed.header.correlation_id) == ("Metadata", 12, 42)
    assert parsed.header.client_id == "kafka-python-test"
    assert parsed.body["topics"][0]["name"] == "orders"
    assert parsed.body["allow_auto_topic_creation"] is False


def test_unknown_api_and_version_are_unsupported():
    with pytest.raises(Unsupported) as info:
        parse_request(struct.pack(">hhi", 999, 0, 7) + b"\x00\x00")
    assert (info.value.api_key, info.value.correlation_id) == (999, 7)
    with pytest.raises(Unsupported):
        parse_request(struct.pack(">hhi", 3, 99, 8) + b"\x00\x00")


def test_api_versions_with_an_unknown_version_gets_a_v0_answer():
    from kafka.protocol.metadata import ApiVersionsResponse

    with pytest.raises(Unsupported) as info:
        parse_request(struct.pack(">hhi", 18, 77, 9) + b"\x00\x00")
    chunks = unsupported_version_response(info.value, ErrorCode.UNSUPPORTED_VERSION)
    raw = b"".join(chunks)
    (size, correlation) = struct.unpack_from(">ii", raw)
    assert size == len(raw) - 4 and correlation == 9
    theirs = ApiVersionsResponse.decode(raw[8:], version=3)  # read as v0 because of the error
    assert theirs.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key for k in theirs.api_keys} == set(APIS)


def test_response_is_size_prefixed_with_the_right_header():
    api = APIS[3]
    raw = b"".join(encode_response(api, 9, 5, {"brokers": [], "topics": []}))
    size, correlation = struct.unpack_from(">ii", raw)
    assert size == len(raw) - 4 and correlation == 5
    assert raw[8] == 0  # v1 response header: empty tagged fields
    assert api.response.decode(raw[9:], 9)["topics"] == []


def test_truncated_header_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        parse_request(b"\x00\x03\x00")


def test_compatibility_doc_is_generated_from_the_code():
    assert compat_main(["--check"]) == 0, "run: python -m data_plane.protocol.compat"


def test_kafka4_minimum_versions_match_kafka_4s_definitions():
    """The compatibility page's "Kafka 4 from" column: kafka-python's classes are generated
    from Kafka 4's message definitions, so their lowest valid version is Kafka 4's. (An
    API whose lowest version served here is Kafka 4's needs no entry.)"""
    from data_plane.protocol.compat import KAFKA4_MIN_VERSION
    from data_plane.protocol.messages import APIS
    from tests.protocol.oracle import kafka_python_class

    for api in APIS.values():
        cls = kafka_python_class(api.request)
        if cls is None:
            continue  # an API kafka-python lacks (all of them new in Kafka 3+)
        listed = KAFKA4_MIN_VERSION.get(api.key, api.min_version)
        assert listed == cls.valid_versions[0], api.name
