"""Turning a request frame into (header, body) and a response body into framed chunks.

Unknown API keys and versions outside the supported range raise :class:`Unsupported`, which
carries what the broker needs to answer UNSUPPORTED_VERSION. For ApiVersions itself the
answer is a v0 body listing what is supported, so that a client that asked with a version
we do not know can still learn ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from data_plane.protocol.framing import size_prefix
from data_plane.protocol.headers import (
    API_VERSIONS_KEY,
    RequestHeader,
    peek_api,
    peek_client_id,
    read_request_header,
    request_header_version,
    response_header_version,
    write_response_header,
)
from data_plane.protocol.messages import APIS, Api
from data_plane.protocol.schema import in_range
from data_plane.protocol.types import Buffer

B = TypeVar("B")


@dataclass(frozen=True)
class Request:
    header: RequestHeader
    api: Api
    body: dict[str, Any]

    @property
    def version(self) -> int:
        return self.header.api_version

    def body_as(self, kind: type[B]) -> B:
        """The body, typed as ``kind``: its API's TypedDict in :mod:`.bodies`, e.g.
        ``request.body_as(bodies.ProduceRequest)``. The same dict, not a copy or a check
        of its contents; only the type's name is checked against the API (with asserts on).
        """
        assert kind.__name__ == f"{self.api.name}Request", f"{kind} for {self.api.name}"
        return cast(B, self.body)


class Unsupported(Exception):
    def __init__(
        self, api_key: int, api_version: int, correlation_id: int, client_id: str | None = None
    ) -> None:
        super().__init__(f"API {api_key} v{api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    @property
    def api_name(self) -> str:
        """The API's name when this broker knows the key (at other versions), else its key."""
        api = APIS.get(self.api_key)
        return api.name if api is not None else f"key {self.api_key}"


def parse_request(frame: Buffer) -> Request:
    key, version, correlation = peek_api(frame)
    api = APIS.get(key)
    if api is None or not in_range(version, api.served):
        raise Unsupported(key, version, correlation, peek_client_id(frame))
    flexible = api.request.is_flexible(version)
    header = read_request_header(frame, request_header_version(flexible))
    # Like Kafka's own broker, ignore bytes after the last field: librdkafka sends a few
    # extra bytes in some Metadata v12 requests, and newer clients may append more.
    body = api.request.decode(frame, version, header.size, exact=False)
    return Request(header, api, body)


def encode_response(
    api: Api, version: int, correlation_id: int, body: Mapping[str, Any]
) -> list[Any]:
    """Size-prefixed response: ``[prefix+header+bytes, (file slice, bytes)...]``."""
    flexible = api.response.is_flexible(version)
    header = write_response_header(correlation_id, response_header_version(api.key, flexible))
    chunks = api.response.encode_chunks(body, version)
    length = len(header) + sum(len(c) for c in chunks)
    first = size_prefix(length) + header
    if chunks and isinstance(chunks[0], bytes | bytearray):
        return [first + bytes(chunks[0]), *chunks[1:]]
    return [first, *chunks]


def supported_api_versions() -> list[dict[str, int]]:
    return [
        {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
        for api in sorted(APIS.values(), key=lambda a: a.key)
    ]


def unsupported_version_response(error: Unsupported, error_code: int) -> list[Any]:
    """The answer to a request whose API key or version this broker does not serve.

    For ApiVersions this is Kafka's own fallback: a v0 response carrying the error and the
    supported ranges, so the client can retry at a version both sides know. No schema
    exists for an unknown API key or version, so every other request gets the same
    minimal shape: response header v0 (the correlation id), then int16 ``error_code`` and
    an empty int32 array. Clients that negotiated with ApiVersions never see it.
    """
    keys = supported_api_versions() if error.api_key == API_VERSIONS_KEY else []
    body = {"error_code": error_code, "api_keys": keys}
    return encode_response(APIS[API_VERSIONS_KEY], 0, error.correlation_id, body)
