"""One blocking Kafka protocol connection, on the project's own codec.

Small on purpose: the control plane asks brokers a handful of questions (metadata, offsets
by timestamp, the timestamp of a record), so a socket, a correlation id and SASL are all
it needs. Each request waits for its answer; nothing is pipelined.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import Any, TypeVar, overload

import scramp  # type: ignore[import-untyped]

from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.headers import (
    read_response_header,
    request_header_version,
    response_header_version,
    write_request_header,
)
from data_plane.protocol.messages import APIS
from data_plane.protocol.types import ProtocolError

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
MAX_RESPONSE_BYTES = 256 * 2**20

R = TypeVar("R")


class KafkaClientError(Exception):
    """A broker could not be reached or refused a request; ``code`` is Kafka's error."""

    def __init__(self, message: str, code: int = ErrorCode.UNKNOWN_SERVER_ERROR) -> None:
        super().__init__(message)
        self.code = code


class AuthenticationFailed(KafkaClientError):
    pass


class Connection:
    def __init__(
        self, host: str, port: int, *, client_id: str = "millrace", timeout: float = 10.0
    ) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise KafkaClientError(
                f"cannot connect to broker {self.address}: {exc}",
                ErrorCode.BROKER_NOT_AVAILABLE,
            ) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0

    @overload
    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]: ...

    @overload
    def request(
        self, api_key: int, version: int, body: Mapping[str, Any], answer: type[R]
    ) -> R: ...

    def request(
        self,
        api_key: int,
        version: int,
        body: Mapping[str, Any],
        answer: type[Any] | None = None,
    ) -> Any:
        """Send ``body`` and wait for the answer. With ``answer`` (the API's response type in
        :mod:`~data_plane.protocol.bodies`) the result is typed as it; it is the same dict.

        Type ``body`` as the request's TypedDict to have its keys checked too::

            body: bodies.MetadataRequest = {"topics": None}
            answer = conn.request(METADATA, 9, body, bodies.MetadataResponse)
        """
        api = APIS[api_key]
        assert answer is None or answer.__name__ == f"{api.name}Response", answer
        self._correlation += 1
        header = write_request_header(
            api_key,
            version,
            self._correlation,
            self.client_id,
            request_header_version(api.request.is_flexible(version)),
        )
        payload = header + api.request.encode(body, version)
        try:
            self._sock.sendall(struct.pack(">i", len(payload)) + payload)
            (size,) = struct.unpack(">i", self._recv(4))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise KafkaClientError(f"broker {self.address} sent a {size}-byte frame")
            data = self._recv(size)
        except OSError as exc:
            self.close()
            raise KafkaClientError(
                f"broker {self.address}: {exc}", ErrorCode.NETWORK_EXCEPTION
            ) from None
        flexible = api.response.is_flexible(version)
        try:
            correlation, pos = read_response_header(
                data, response_header_version(api_key, flexible)
            )
            if correlation != self._correlation:
                raise ProtocolError(f"correlation id {correlation}, expected {self._correlation}")
            result = api.response.decode(data[pos:], version)
        except ProtocolError as exc:
            self.close()
            raise KafkaClientError(
                f"broker {self.address} sent a malformed answer: {exc}"
            ) from None
        return result

    def authenticate(self, mechanism: str, username: str, password: str) -> None:
        """SASL over SaslHandshake v1 + SaslAuthenticate v2 (SCRAM-SHA-* or PLAIN)."""
        hello: bodies.SaslHandshakeRequest = {"mechanism": mechanism}
        shake = self.request(SASL_HANDSHAKE, 1, hello, bodies.SaslHandshakeResponse)
        if shake["error_code"] != ErrorCode.NONE:
            raise AuthenticationFailed(
                f"broker {self.address} refused SASL {mechanism}: "
                f"{ErrorCode(shake['error_code']).name} (it offers "
                f"{', '.join(shake['mechanisms'])})",
                shake["error_code"],
            )
        if mechanism == "PLAIN":
            self._sasl(f"\0{username}\0{password}".encode())
            return
        scram = scramp.ScramClient([mechanism], username, password)
        server_first = self._sasl(scram.get_client_first().encode())
        try:
            scram.set_server_first(server_first.decode())
            server_final = self._sasl(scram.get_client_final().encode())
            scram.set_server_final(server_final.decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise AuthenticationFailed(f"SCRAM with {self.address} failed: {exc}") from None

    def _sasl(self, token: bytes) -> bytes:
        body: bodies.SaslAuthenticateRequest = {"auth_bytes": token}
        answer = self.request(SASL_AUTHENTICATE, 2, body, bodies.SaslAuthenticateResponse)
        if answer["error_code"] != ErrorCode.NONE:
            self.close()
            raise AuthenticationFailed(
                f"broker {self.address} refused authentication: {answer['error_message']}",
                answer["error_code"],
            )
        return bytes(answer["auth_bytes"])

    def _recv(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self._sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._sock.close()
