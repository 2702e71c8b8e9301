"""API key secrets: generation, the stored (non-recoverable) forms, and verification.

A secret exists in plain text only in the response to the request that created the key.
The row keeps SCRAM-SHA-256/512 credentials (for the Kafka protocol's SASL/SCRAM, Step 3)
and an Argon2 hash (for HTTP auth and SASL/PLAIN). Verifying Argon2 costs tens of ms, so
a successful verification is remembered in-process for ``MILLRACE_API_KEY_CACHE_SECONDS``
under an HMAC of the pair (never the secret itself); revocation and expiry are checked on
every request regardless.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

import scramp
from django.conf import settings
from django.contrib.auth.hashers import check_password, make_password

KEY_ID_PREFIX = "MRK"
SECRET_PREFIX = "mrsec_"
_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
KEY_ID_RANDOM_CHARS = 16


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True)
class StoredSecret:
    secret_hash: str
    sha256: ScramCredential
    sha512: ScramCredential


def generate_key_id() -> str:
    return KEY_ID_PREFIX + "".join(
        secrets.choice(_KEY_ALPHABET) for _ in range(KEY_ID_RANDOM_CHARS)
    )


def generate_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(36)


def _scram(mechanism: str, secret: str, iterations: int) -> ScramCredential:
    salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
        secret, iteration_count=iterations
    )
    return ScramCredential(salt, stored_key, server_key, count)


def derive_stored_secret(secret: str) -> StoredSecret:
    iterations = settings.MILLRACE_SCRAM_ITERATIONS
    return StoredSecret(
        secret_hash=make_password(secret),
        sha256=_scram("SCRAM-SHA-256", secret, iterations),
        sha512=_scram("SCRAM-SHA-512", secret, iterations),
    )


class _VerifiedCache:
    """HMAC(key_id, secret) -> (secret_hash it was checked against, expiry time)."""

    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[str, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _digest(key_id: str, secret: str) -> bytes:
        return hmac.new(
            settings.SECRET_KEY.encode(), f"{key_id}\0{secret}".encode(), hashlib.sha256
        ).digest()

    def hit(self, key_id: str, secret: str, secret_hash: str) -> bool:
        digest = self._digest(key_id, secret)
        with self._lock:
            entry = self._entries.get(digest)
        return entry is not None and entry[0] == secret_hash and entry[1] > time.monotonic()

    def remember(self, key_id: str, secret: str, secret_hash: str) -> None:
        ttl = settings.MILLRACE_API_KEY_CACHE_SECONDS
        if ttl <= 0:
            return
        now = time.monotonic()
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries = {d: e for d, e in self._entries.items() if e[1] > now}
            self._entries[self._digest(key_id, secret)] = (secret_hash, now + ttl)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


verified_cache = _VerifiedCache()


_dummy_hash: str | None = None


def spend_a_check(secret: str) -> None:
    """Run the configured password hasher once and throw the answer away: an unknown key
    then costs what a known key with a wrong secret costs, so timing does not tell a
    guesser which key ids exist."""
    global _dummy_hash
    if _dummy_hash is None:
        _dummy_hash = make_password(secrets.token_urlsafe(32))
    check_password(secret, _dummy_hash)


def secret_matches(key_id: str, secret: str, secret_hash: str) -> bool:
    if verified_cache.hit(key_id, secret, secret_hash):
        return True
    if check_password(secret, secret_hash):
        verified_cache.remember(key_id, secret, secret_hash)
        return True
    return False
