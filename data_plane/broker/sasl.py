"""SASL for Kafka connections: SCRAM-SHA-256, SCRAM-SHA-512 (scramp) and PLAIN.

A :class:`SaslSession` consumes the client's SaslAuthenticate tokens and produces the
server's answers; it never sees the secret for SCRAM (only the stored credentials), and
PLAIN verifies against the key's slow hash. Credential lookups are blocking store calls
and run in a worker thread (``lookup``), never on the event loop.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import scramp  # type: ignore[import-untyped]

from data_plane.broker.model import Principal
from data_plane.broker.ports import MetadataStore

logger = logging.getLogger("millrace.broker.sasl")

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")

Lookup = Callable[..., Awaitable[Any]]


class SaslFailed(Exception):
    """Authentication failed; the message is safe to send to the client."""


class SaslSession:
    def __init__(self, mechanism: str, store: MetadataStore, lookup: Lookup) -> None:
        if mechanism not in MECHANISMS:
            raise SaslFailed(f"unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self.store = store
        self.lookup = lookup
        self.principal: Principal | None = None
        self._server: Any = None
        self._key_id: str | None = None
        self.done = False

    async def step(self, token: bytes) -> bytes:
        if self.mechanism == "PLAIN":
            return await self._plain(token)
        return await self._scram(token)

    async def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailed("malformed PLAIN token")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise SaslFailed("authorization id must be empty or the user name")
        principal = await self.lookup(self.store.verify_plain, user, password)
        if principal is None:
            raise SaslFailed("Authentication failed: invalid credentials")
        self.principal = principal
        self.done = True
        return b""

    async def _scram(self, token: bytes) -> bytes:
        try:
            if self._server is None:
                return await self._scram_first(token)
            self._server.set_client_final(token.decode("utf-8"))
            answer: str = self._server.get_server_final()
        except scramp.ScramException as exc:
            logger.debug("SCRAM exchange failed: %s", exc)
            raise SaslFailed("Authentication failed during SCRAM exchange") from None
        except UnicodeDecodeError:
            raise SaslFailed("malformed SCRAM message") from None
        assert self._key_id is not None
        principal = await self.lookup(self.store.principal_for_key, self._key_id)
        if principal is None:
            raise SaslFailed("Authentication failed: key is not active")
        self.principal = principal
        self.done = True
        return answer.encode("utf-8")

    async def _scram_first(self, token: bytes) -> bytes:
        first = token.decode("utf-8")
        # The user name is in the client-first message: "n,,n=<user>,r=<nonce>".
        user = _scram_user(first)
        creds = await self.lookup(self.store.scram_credentials, user, self.mechanism)
        if creds is None:
            raise SaslFailed("Authentication failed: invalid credentials")
        self._key_id = user
        mechanism = scramp.ScramMechanism(self.mechanism)
        # A Kafka-sized server nonce (24 URL-safe characters): librdkafka 2.0 (Debian's
        # kcat) garbles its client-final message when the combined nonce is as long as
        # scramp's default (64 hex characters), failing about one login in three.
        self._server = mechanism.make_server(
            lambda _u: (creds.salt, creds.stored_key, creds.server_key, creds.iterations),
            s_nonce=secrets.token_urlsafe(18),
        )
        self._server.set_client_first(first)
        answer: str = self._server.get_server_first()
        return answer.encode("utf-8")


def _scram_user(client_first: str) -> str:
    try:
        bare = client_first.split(",", 2)[2]
        for part in bare.split(","):
            if part.startswith("n="):
                return part[2:].replace("=2C", ",").replace("=3D", "=")
    except IndexError:
        pass
    raise SaslFailed("malformed SCRAM client-first message")
