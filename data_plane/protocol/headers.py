"""Request header v0-v2 and response header v0-v1.

* request v0: api_key int16, api_version int16, correlation_id int32;
* request v1: + client_id (nullable string, always the classic encoding);
* request v2: + tagged fields (used with flexible request versions);
* response v0: correlation_id int32; response v1: + tagged fields (flexible versions),
  except ApiVersions, whose response always uses header v0 so that a client can parse it
  before it knows which versions the broker speaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from data_plane.protocol.types import (
    INT16,
    INT32,
    STRING,
    Buffer,
    ProtocolError,
    read_tagged_fields,
    write_tagged_fields,
)

API_VERSIONS_KEY = 18


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes the header occupies in the frame


def peek_api(buf: Buffer) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` from any request frame (v0 prefix)."""
    if len(buf) < 8:
        raise ProtocolError("request frame shorter than a header")
    key, pos = INT16.read(buf, 0)
    version, pos = INT16.read(buf, pos)
    correlation, _ = INT32.read(buf, pos)
    return key, version, correlation


def peek_client_id(buf: Buffer) -> str | None:
    """The client id of any request frame whose header has one (header v1 and v2 carry it
    in the same place, as a classic nullable string), or None when it cannot be read."""
    try:
        client_id, _ = STRING.read(buf, 8, compact=False, nullable=True)
    except (ProtocolError, UnicodeDecodeError):
        return None
    return client_id  # type: ignore[no-any-return]


def read_request_header(buf: Buffer, header_version: int) -> RequestHeader:
    key, version, correlation = peek_api(buf)
    pos = 8
    client_id = None
    if header_version >= 1:
        client_id, pos = STRING.read(buf, pos, compact=False, nullable=True)
    if header_version >= 2:
        _, pos = read_tagged_fields(buf, pos)
    return RequestHeader(key, version, correlation, client_id, pos)


def write_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, header_version: int
) -> bytes:
    out = bytearray()
    INT16.write(api_key, out)
    INT16.write(api_version, out)
    INT32.write(correlation_id, out)
    if header_version >= 1:
        STRING.write(client_id, out, compact=False, nullable=True)
    if header_version >= 2:
        write_tagged_fields({}, out)
    return bytes(out)


def write_response_header(correlation_id: int, header_version: int) -> bytes:
    out = bytearray()
    INT32.write(correlation_id, out)
    if header_version >= 1:
        write_tagged_fields({}, out)
    return bytes(out)


def read_response_header(buf: Buffer, header_version: int) -> tuple[int, int]:
    correlation, pos = INT32.read(buf, 0)
    if header_version >= 1:
        _, pos = read_tagged_fields(buf, pos)
    return correlation, pos


def request_header_version(flexible: bool) -> int:
    return 2 if flexible else 1


def response_header_version(api_key: int, flexible: bool) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if flexible else 0
