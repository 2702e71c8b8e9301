"""Fuzzing every supported request schema: malformed input raises ProtocolError, nothing else.

Two sources per API version: arbitrary bytes, and mutations (truncation, byte flips,
insertions) of a valid encoding built from the schema. Any other exception would escape the
broker's connection handler as a crash; a ProtocolError closes only that connection.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_plane.protocol.messages import APIS
from data_plane.protocol.types import ProtocolError
from tests.protocol.oracle import sample

CASES = [
    (api, version)
    for api in sorted(APIS.values(), key=lambda a: a.key)
    for version in range(api.min_version, api.max_version + 1)
]
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def decode_or_protocol_error(api, version, raw):
    try:
        api.request.decode(raw, version)
    except ProtocolError:
        pass


@pytest.mark.parametrize(("api", "version"), CASES, ids=lambda x: getattr(x, "name", x))
@FUZZ
@given(raw=st.binary(max_size=200))
def test_random_bytes(api, version, raw):
    decode_or_protocol_error(api, version, raw)


@pytest.mark.parametrize(("api", "version"), CASES, ids=lambda x: getattr(x, "name", x))
@FUZZ
@given(data=st.data())
def test_mutated_valid_requests(api, version, data):
    valid = api.request.encode(
        sample(api.request.fields, version, api.request.is_flexible(version), nulls=False), version
    )
    raw = bytearray(valid)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        kind = data.draw(st.sampled_from(["cut", "flip", "insert"]))
        if kind == "cut" and raw:
            del raw[data.draw(st.integers(min_value=0, max_value=len(raw) - 1)) :]
        elif kind == "flip" and raw:
            i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
            raw[i] = data.draw(st.integers(min_value=0, max_value=255))
        else:
            i = data.draw(st.integers(min_value=0, max_value=len(raw)))
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    decode_or_protocol_error(api, version, bytes(raw))
