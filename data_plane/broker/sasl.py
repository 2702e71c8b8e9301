"""SASL for Kafka connections: SCRAM-SHA-256, SCRAM-SHA-512 (scramp) and PLAIN.

A :class:`SaslSession` consumes the client's SaslAuthenticate tokens and produces the
server's answers; it never sees the secret for SCRAM (only the stored credentials), and
PLAIN verifies against the key's slow hash. Credential lookups are blocking store calls
and run in a worker thread (``lookup``), never on the event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import scramp  # type: ignore[import-untyped]

from data_plane.broker.ports import Credentials
from data_plane.metadata.model import Principal

logger = logging.getLogger("millrace.broker.sasl")

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")

Lookup = Callable[..., Awaitable[Any]]


class SaslFailed(Exception):
    """Authentication failed; the message is safe to send to the client."""


def fake_credentials(
    secret: bytes, user: str, mechanism: str, iterations: int
) -> tuple[bytes, bytes, bytes, int]:
    """SCRAM credentials for a user that does not exist: a salt that is the same for the
    same name on every attempt and every broker (an HMAC under a deployment secret), the
    usual iteration count, and keys no password matches. Answering an unknown user with
    these, and refusing only at the proof, tells a guesser nothing about which users
    (API keys, tenants, console members) exist: Kafka's enumeration defence."""

    def derive(label: str) -> bytes:
        return hmac.new(secret, f"{label}:{mechanism}:{user}".encode(), hashlib.sha512).digest()

    size = 32 if mechanism == "SCRAM-SHA-256" else 64
    # Salts as long as real ones of that kind: 32 bytes for API keys, 16 for Millrace's
    # own principals (internal_auth), so neither kind of name stands out.
    salt = 16 if user.startswith("__millrace-") else 32
    return derive("fake-salt")[:salt], derive("stored")[:size], derive("server")[:size], iterations


class SaslSession:
    def __init__(
        self,
        mechanism: str,
        store: Credentials,
        lookup: Lookup,
        *,
        fake_secret: bytes = b"",
        scram_iterations: int = 4096,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise SaslFailed(f"unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self.store = store
        self.lookup = lookup
        self._fake_secret = fake_secret
        self._scram_iterations = scram_iterations
        self._unknown_user = False
        self.principal: Principal | None = None
        self._server: Any = None
        self._key_id: str | None = None
        self._client_nonce: str | None = None
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
            final = token.decode("utf-8")
            self._accept_doubled_client_nonce(final)
            self._server.set_client_final(final)
            if self._unknown_user:  # no proof can match made-up keys; be sure anyway
                raise scramp.ScramException("unknown user")
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
            # Carry on as for a known user; the proof fails at the final step, with the
            # answer a wrong password gets.
            self._unknown_user = True
            info = fake_credentials(self._fake_secret, user, self.mechanism, self._scram_iterations)
        else:
            info = (creds.salt, creds.stored_key, creds.server_key, creds.iterations)
        self._key_id = user
        self._client_nonce = _scram_attr(first.split(",", 2)[2], "r")
        mechanism = scramp.ScramMechanism(self.mechanism)
        self._server = mechanism.make_server(lambda _u: info)
        self._server.set_client_first(first)
        answer: str = self._server.get_server_first()
        return answer.encode("utf-8")

    def _accept_doubled_client_nonce(self, client_final: str) -> None:
        """Accept librdkafka's pre-2.6.1 client-final nonce, and only that variant.

        RFC 5802 wants the client to echo the combined nonce (client + server) it got in
        server-first. librdkafka before 2.6.1 (Debian's kcat is 2.0.2) prepends its own
        nonce once more: ``r=<client nonce><client nonce><server nonce>``. Kafka 3.x
        accepted that (it checked ``endsWith``); Kafka 4 refuses it. The doubled form
        still proves the client saw our server nonce, and the proof is computed over the
        message as sent, so accepting exactly this form keeps replay protection. Any other
        nonce is left for scramp to reject.
        """
        expected = str(self._server.nonce)
        sent = _scram_attr(client_final, "r")
        if self._client_nonce and sent == self._client_nonce + expected:
            logger.debug("accepting a doubled client nonce (librdkafka < 2.6.1)")
            self._server.nonce = type(self._server.nonce)(sent)


def _scram_attr(message: str, name: str) -> str | None:
    for part in message.split(","):
        if part.startswith(name + "="):
            return part[len(name) + 1 :]
    return None


def _scram_user(client_first: str) -> str:
    try:
        bare = client_first.split(",", 2)[2]
        for part in bare.split(","):
            if part.startswith("n="):
                return part[2:].replace("=2C", ",").replace("=3D", "=")
    except IndexError:
        pass
    raise SaslFailed("malformed SCRAM client-first message")
