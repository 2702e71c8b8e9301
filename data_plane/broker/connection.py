"""One client connection: framing, SASL, and dispatch to the handlers.

Requests are handled one at a time, in order (Kafka mutes a connection while its request
is in flight), so responses never reorder and one slow client holds at most one request's
worth of memory. Frames are capped before allocation: 512 KiB until SASL completes,
``max_request_bytes`` after. Fetch data is written with ``loop.sendfile`` (os.sendfile on
plain sockets) straight from segment files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from data_plane.broker.config import BrokerConfig
from data_plane.broker.handlers import DISPATCH
from data_plane.broker.handlers.context import CloseConnection, RequestContext, Services
from data_plane.broker.limits import MemoryPool
from data_plane.broker.metrics import BrokerMetrics
from data_plane.broker.ports import Credentials
from data_plane.broker.sasl import MECHANISMS, SaslFailed, SaslSession
from data_plane.log.segment import FileSlice
from data_plane.metadata.model import Principal
from data_plane.protocol import bodies
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.framing import FrameReader, size_prefix
from data_plane.protocol.messages import (
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    sasl_authenticate,
    sasl_handshake,
)
from data_plane.protocol.requests import (
    Request,
    Unsupported,
    encode_response,
    parse_request,
    unsupported_version_response,
)
from data_plane.protocol.types import ProtocolError

logger = logging.getLogger("millrace.broker")
R = TypeVar("R")

PRE_AUTH_MAX_BYTES = 512 * 1024
# ApiVersions, SaslHandshake, SaslAuthenticate
TRANSACTION_VERSION = "transaction.version"
PRE_AUTH_APIS = frozenset({api_versions.KEY, sasl_handshake.KEY, sasl_authenticate.KEY})
# ConsumerGroupHeartbeat, ConsumerGroupDescribe: advertised only with the consumer protocol.
CONSUMER_PROTOCOL_APIS = frozenset({consumer_group_heartbeat.KEY, consumer_group_describe.KEY})


class ConnectionHost(Protocol):
    """What a connection needs from the broker that accepted it."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def services(self) -> Services: ...

    @property
    def store(self) -> Credentials: ...

    @property
    def request_memory(self) -> MemoryPool: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    @property
    def features_epoch(self) -> int: ...

    def auth_failure_delay(self, host: str) -> float: ...

    def admit_tenant(self, tenant_id: int) -> bool: ...

    def tenant_suspended(self, tenant_id: int) -> str | None: ...


async def _in_thread(fn: Callable[..., R], *args: Any) -> R:
    return await asyncio.to_thread(fn, *args)


# File slices up to this size are read and sent with the rest of the response.
SMALL_SLICE_BYTES = 64 * 1024


def _read_slice(chunk: FileSlice) -> bytes:
    fd = os.open(chunk.path, os.O_RDONLY)
    try:
        data = os.pread(fd, chunk.length, chunk.position)
    finally:
        os.close(fd)
    if len(data) != chunk.length:
        raise OSError(f"{chunk.path}: read {len(data)} of {chunk.length} bytes")
    return data


class Connection:
    def __init__(
        self,
        broker: ConnectionHost,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        tls: bool = False,
    ) -> None:
        self.broker = broker
        self.tls = tls
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.host = peer[0] if peer else ""
        self.principal: Principal | None = None
        self.frames = FrameReader(PRE_AUTH_MAX_BYTES)
        self.sasl: SaslSession | None = None
        self.task: asyncio.Task[Any] | None = None
        self._closing = False
        self._waiting_for_bytes = False
        self.counted_tenant: int | None = None  # counted against its tenant's limit
        self._reserved = 0  # bytes of the broker's request pool this connection holds
        self._opened = time.monotonic()
        self.authenticated_at = 0.0  # monotonic, when SASL succeeded
        self._unserved_seen: set[tuple[int, int]] = set()  # (API key, version) logged
        self._raw_sasl = False  # after SaslHandshake v0: bare SASL tokens until done
        # Requests by (client id, API, version, served) since the last fold into the
        # broker's ClientVersions, and the software named in ApiVersions v3+ (KIP-511).
        self.uses: defaultdict[tuple[str, int, int, bool], int] = defaultdict(int)
        self.uses_since = time.time()
        self.software = ("", "")

    def take_uses(self) -> tuple[dict[tuple[str, int, int, bool], int], float]:
        """The request counts since the last call, and since when (then start again)."""
        uses, since = dict(self.uses), self.uses_since
        self.uses.clear()
        self.uses_since = time.time()
        return uses, since

    def _note_unserved(self, exc: Unsupported) -> None:
        """Count a request at a version not served, and say so once per connection and
        (API, version) at INFO, naming the client: operators see who must upgrade."""
        self.broker.metrics.unserved_requests.labels(exc.api_name, str(exc.api_version)).inc()
        self.uses[(exc.client_id or "", exc.api_key, exc.api_version, False)] += 1
        seen = (exc.api_key, exc.api_version)
        if seen in self._unserved_seen or len(self._unserved_seen) >= 64:
            return
        self._unserved_seen.add(seen)
        who = self.principal
        logger.info(
            "client %r at %s (%s) sent %s v%s, which this broker does not serve: answered "
            "UNSUPPORTED_VERSION",
            exc.client_id,
            self.host,
            f"tenant {who.tenant_slug}, {who.name}" if who is not None else "not authenticated",
            exc.api_name,
            exc.api_version,
        )

    def request_close(self) -> None:
        """Finish the request in progress, then close (graceful shutdown).

        A connection waiting for its next request is stopped at once; one serving a
        request closes after answering it.
        """
        self._closing = True
        if self._waiting_for_bytes and self.task is not None:
            self.task.cancel()

    def abort(self) -> None:
        self._closing = True
        self.writer.transport.abort()

    async def run(self) -> None:
        try:
            if self.broker.config.allow_anonymous:
                self.principal = await asyncio.to_thread(self.broker.store.anonymous_principal)
                if self.principal is not None:
                    self.frames.max_frame_bytes = self.broker.config.max_request_bytes
            while not self._closing:
                frame = self.frames.next_frame()
                if frame is None:
                    self._waiting_for_bytes = True
                    try:
                        # One deadline for both waits (asyncio.timeout: a timer handle, no
                        # task per read on this hot path).
                        async with asyncio.timeout(self._read_timeout()):
                            # Reserve the whole request before reading its body
                            # (limits.MemoryPool), then read: large frames (producer
                            # batches) arrive in as few reads as the transport allows.
                            pending = self.frames.pending_size
                            if pending > self._reserved:
                                self._reserved += await self.broker.request_memory.acquire(
                                    pending - self._reserved
                                )
                            data = await self.reader.read(max(65536, self.frames.missing))
                    except TimeoutError:
                        why = (
                            "not authenticated in time"
                            if self.principal is None
                            else "idle for longer than connections.max.idle.ms"
                        )
                        logger.info("closing %s: %s", self.host, why)
                        break
                    finally:
                        self._waiting_for_bytes = False
                    if not data:
                        break
                    self.frames.feed(data)
                    continue
                keep = await self._serve(frame)
                if self._reserved:  # answered: the next request reserves its own size
                    self.broker.request_memory.release(self._reserved)
                    self._reserved = 0
                if not keep:
                    break
        except ProtocolError as exc:
            logger.warning("closing %s: malformed request: %s", self.host, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            if not self._closing:
                raise  # not our graceful close: let the cancellation through
        finally:
            if self._reserved:
                self.broker.request_memory.release(self._reserved)
                self._reserved = 0
            with contextlib.suppress(Exception):
                self.writer.close()

    def _read_timeout(self) -> float | None:
        """How long the next read may wait: what is left of the authentication deadline
        before SASL completes, the idle limit after."""
        config = self.broker.config
        if self.principal is None and config.auth_timeout_seconds:
            return max(0.0, self._opened + config.auth_timeout_seconds - time.monotonic())
        return config.idle_timeout_seconds or None

    async def _serve(self, frame: bytes) -> bool:
        if self._raw_sasl:
            return await self._raw_sasl_token(bytes(frame))
        try:
            request = parse_request(frame)
        except ProtocolError:
            if logger.isEnabledFor(logging.DEBUG) and frame[:2] not in (b"\x00\x11", b"\x00\x24"):
                # Never for SaslHandshake/SaslAuthenticate, whose frames may carry secrets.
                logger.debug("malformed frame from %s: %s", self.host, frame[:512].hex())
            raise
        except Unsupported as exc:
            # Answered with UNSUPPORTED_VERSION; before authentication only ApiVersions
            # keeps the connection open (anything else would close it there anyway).
            self._note_unserved(exc)
            await self._write(unsupported_version_response(exc, ErrorCode.UNSUPPORTED_VERSION))
            keep = exc.api_key == api_versions.KEY or self.principal is not None
            if not keep:
                logger.warning(
                    "closing %s: unsupported API %s v%s before authentication",
                    self.host,
                    exc.api_key,
                    exc.api_version,
                )
            return keep
        key = request.api.key
        if self.principal is None and key not in PRE_AUTH_APIS:
            logger.warning("closing %s: %s before authentication", self.host, request.api.name)
            return False
        self.uses[(request.header.client_id or "", key, request.version, True)] += 1
        # Each API's response body type (bodies.<Api>Response); the handlers' meet as Any.
        body: Mapping[str, Any] | None
        if key == api_versions.KEY:
            if request.version >= 3:
                asked = request.body_as(bodies.ApiVersionsRequest)
                self.software = (asked["client_software_name"], asked["client_software_version"])
            body = self._api_versions(request.version)
        elif key == sasl_handshake.KEY:
            body = self._sasl_handshake(request)
        elif key == sasl_authenticate.KEY:
            body, ok = await self._sasl_authenticate(request)
            await self._respond(request, body)
            return ok
        else:
            assert self.principal is not None
            ctx = RequestContext(
                self.broker.services,
                self.principal,
                self.host,
                request.version,
                request.header.client_id or "",
                self.tls,
            )
            if not self.principal.broker:
                self.broker.services.usage.request(self.principal.tenant_id, self.principal.name)
            handler = DISPATCH[key]
            started = time.perf_counter()
            try:
                body = await handler(ctx, request.body)
                self.broker.metrics.request_done(request.api.name, started, body)
            except CloseConnection as exc:
                logger.info("closing %s: %s", self.host, exc)
                return False
            except Exception:
                # A bug must not take the broker down: log it and drop this connection
                # (the client reconnects and retries, as after any network error).
                logger.exception(
                    "%s v%s failed for %s", request.api.name, request.version, self.host
                )
                return False
            if body is None:  # produce with acks=0: no response at all
                return True
        await self._respond(request, body)
        return True

    async def _respond(self, request: Request, body: Mapping[str, Any]) -> None:
        chunks = encode_response(request.api, request.version, request.header.correlation_id, body)
        throttle = body.get("throttle_time_ms", 0) or 0
        if throttle:
            await asyncio.sleep(throttle / 1000)  # Kafka's delayed response under quota
        await self._write(chunks)

    async def _write(self, chunks: list[Any]) -> None:
        """Send a response: one write for the bytes and small file slices, sendfile for
        large slices (a small response costs one send instead of several syscalls)."""
        loop = asyncio.get_running_loop()
        pending: list[bytes | bytearray | memoryview] = []
        for chunk in chunks:
            if isinstance(chunk, FileSlice):
                if chunk.length <= SMALL_SLICE_BYTES:
                    pending.append(_read_slice(chunk))
                    continue
                if pending:
                    self.writer.write(b"".join(pending))
                    pending = []
                await self.writer.drain()
                with open(chunk.path, "rb") as f:
                    # os.sendfile on plain sockets; asyncio itself falls back to read-and-send
                    # where that is unavailable (e.g. TLS transports).
                    await loop.sendfile(self.writer.transport, f, chunk.position, chunk.length)
            else:
                pending.append(chunk)
        if pending:
            self.writer.write(b"".join(pending))
        await self.writer.drain()

    def _api_versions(self, version: int) -> bodies.ApiVersionsResponse:
        from data_plane.protocol.requests import supported_api_versions

        # supported_api_versions() gives plain dicts of exactly these three fields.
        api_keys: list[bodies.ApiVersionsResponseApiKeys] = [
            {
                "api_key": v["api_key"],
                "min_version": v["min_version"],
                "max_version": v["max_version"],
            }
            for v in supported_api_versions()
            if v["api_key"] not in self._unserved_apis()
        ]
        answer: bodies.ApiVersionsResponse = {
            "error_code": 0,
            "api_keys": api_keys,
            "throttle_time_ms": 0,
        }
        # transaction.version (Kafka 4): supported 0-2, finalized at the configured level
        # (2: transactions V2, KIP-890 part 2). A feature whose minimum is 0 is listed only
        # from ApiVersions v4 (KAFKA-17011); a level of 0 is not listed as finalized.
        level = self.broker.config.transaction_version if version >= 3 else 0
        if version >= 4:
            answer["supported_features"] = [
                {"name": TRANSACTION_VERSION, "min_version": 0, "max_version": 2}
            ]
        if version >= 3 and level > 0:
            answer["finalized_features_epoch"] = self.broker.features_epoch
            answer["finalized_features"] = [
                {
                    "name": TRANSACTION_VERSION,
                    "max_version_level": level,
                    "min_version_level": level,
                }
            ]
        return answer

    def _unserved_apis(self) -> frozenset[int]:
        """APIs this broker knows but does not serve as configured: KIP-848's unless the
        consumer protocol is on (clients that see ConsumerGroupHeartbeat may switch to it
        by themselves)."""
        if not self.broker.services.consumer_protocol:
            return CONSUMER_PROTOCOL_APIS
        return frozenset()

    def _sasl_handshake(self, request: Request) -> bodies.SaslHandshakeResponse:
        mechanism = request.body_as(bodies.SaslHandshakeRequest)["mechanism"]
        # The development listener starts every connection as the anonymous principal; a
        # client (another broker, say) may still sign in, once.
        if self.principal is not None and not self.principal.is_anonymous:
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": list(MECHANISMS)}
        if mechanism not in MECHANISMS:
            return {
                "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                "mechanisms": list(MECHANISMS),
            }
        self.sasl = SaslSession(
            mechanism,
            self.broker.store,
            _in_thread,
            fake_secret=self.broker.config.internal_password.encode(),
            scram_iterations=self.broker.config.scram_iterations,
        )
        self._raw_sasl = request.header.api_version == 0  # v0: bare tokens follow
        return {"error_code": ErrorCode.NONE, "mechanisms": list(MECHANISMS)}

    async def _sasl_authenticate(
        self, request: Request
    ) -> tuple[bodies.SaslAuthenticateResponse, bool]:
        auth_bytes = request.body_as(bodies.SaslAuthenticateRequest)["auth_bytes"]
        code, message, answer = await self._sasl_step(bytes(auth_bytes))
        body: bodies.SaslAuthenticateResponse = {
            "error_code": code,
            "error_message": message,
            "auth_bytes": answer,
            "session_lifetime_ms": 0,
        }
        return body, code == ErrorCode.NONE

    async def _raw_sasl_token(self, token: bytes) -> bool:
        """After SaslHandshake v0 (Kafka before 1.0, KIP-152) the client sends its SASL
        tokens as bare length-prefixed frames, and each answer goes back the same way; a
        failure closes the connection, as Kafka 3.9 did (v0 has no error response)."""
        code, message, answer = await self._sasl_step(token)
        if code != ErrorCode.NONE:
            logger.info("closing %s: SASL (handshake v0) failed: %s", self.host, message)
            return False
        if self.sasl is not None and self.sasl.done:
            self._raw_sasl = False
        await self._write([size_prefix(len(answer)) + answer])
        return True

    async def _sasl_step(self, token: bytes) -> tuple[ErrorCode, str | None, bytes]:
        """One SASL exchange: (error code, message, the server's answer). On the last one
        the connection takes the principal (within its tenant's connection limit)."""
        if self.sasl is None or self.sasl.done:
            return ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake first", b""
        try:
            answer = await self.sasl.step(token)
        except SaslFailed as exc:
            await asyncio.sleep(self.broker.auth_failure_delay(self.host))  # slows guessing
            logger.info("SASL authentication failed from %s", self.host)
            self.broker.metrics.authentication_failures.labels(self.sasl.mechanism).inc()
            return ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc), b""
        if self.sasl.done:
            principal = self.sasl.principal
            if principal is not None and not principal.internal and not principal.broker:
                suspended = self.broker.tenant_suspended(principal.tenant_id)
                if suspended:
                    logger.info("refusing a connection from %s: %s", self.host, suspended)
                    return ErrorCode.SASL_AUTHENTICATION_FAILED, suspended, b""
                if not self.broker.admit_tenant(principal.tenant_id):
                    logger.warning(
                        "refusing a connection of tenant %s from %s: connection limit reached",
                        principal.tenant_slug,
                        self.host,
                    )
                    return (
                        ErrorCode.SASL_AUTHENTICATION_FAILED,
                        "this tenant has reached its connection limit",
                        b"",
                    )
                self.counted_tenant = principal.tenant_id
            self.principal = principal
            self.authenticated_at = time.monotonic()
            if (
                not principal.internal
                and principal.key_id is not None
                and principal.key_id not in self.broker.services.metadata.snapshot.active_keys
            ):
                # A key newer than the broker's metadata: read it now, so the ACLs made
                # with the key apply from its first request (not a refresh later).
                await self.broker.services.metadata.refresh_metadata()
            self.frames.max_frame_bytes = self.broker.config.max_request_bytes
        return ErrorCode.NONE, None, answer
