"""SCRAM sessions against stored credentials, without a broker process."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from base64 import b64decode, b64encode
from typing import Any

import pytest
import scramp

from data_plane.broker.ports import ScramCredentials
from data_plane.broker.sasl import SaslFailed, SaslSession
from data_plane.metadata.model import Principal

PASSWORD = "mrsec_correct-horse"
PRINCIPAL = Principal(1, "acme", "User:app", "MRKKEY")


class Store:
    def __init__(self, mechanism: str) -> None:
        salt, stored, server, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
            PASSWORD, iteration_count=4096
        )
        self.creds = ScramCredentials(salt, stored, server, iterations)

    def scram_credentials(self, key_id: str, mechanism: str) -> ScramCredentials | None:
        return self.creds if key_id == "MRKKEY" else None

    def principal_for_key(self, key_id: str) -> Principal | None:
        return PRINCIPAL if key_id == "MRKKEY" else None


async def call(fn: Any, *args: Any) -> Any:
    return fn(*args)


def exchange(mechanism: str, rewrite_final=lambda final, client_nonce: final, user="MRKKEY"):
    """Run one SCRAM login with scramp's client; ``rewrite_final`` edits client-final."""
    session = SaslSession(mechanism, Store(mechanism), call)  # type: ignore[arg-type]
    client = scramp.ScramClient([mechanism], user, PASSWORD)
    client_nonce = "fyko+d2lbbFgONRv9qkxdawL"
    client.c_nonce = scramp.core.Nonce(client_nonce)

    async def run() -> bytes:
        server_first = await session.step(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        final = rewrite_final(client.get_client_final(), client_nonce)
        return await session.step(final.encode())

    return session, asyncio.run(run())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_returns_the_server_signature(mechanism):
    session, answer = exchange(mechanism)
    assert session.done and session.principal == PRINCIPAL
    assert answer.startswith(b"v=")


def test_doubled_client_nonce_from_old_librdkafka_is_accepted():
    # Build the exact bytes librdkafka < 2.6.1 sends, with a proof computed over them.
    mechanism = "SCRAM-SHA-256"
    session = SaslSession(mechanism, Store(mechanism), call)  # type: ignore[arg-type]
    client_nonce = "fyko+d2lbbFgONRv9qkxdawL"

    async def run() -> bytes:
        first = f"n,,n=MRKKEY,r={client_nonce}"
        server_first = (await session.step(first.encode())).decode()
        attrs = dict(part.split("=", 1) for part in server_first.split(","))
        combined = attrs["r"]
        assert combined.startswith(client_nonce) and len(combined) > len(client_nonce)
        without_proof = f"c=biws,r={client_nonce}{combined}"
        auth = f"{first[3:]},{server_first},{without_proof}"
        # RFC 5802 by hand (hashlib), as librdkafka computes it over the doubled nonce.
        salted = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), b64decode(attrs["s"]), 4096)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored = hashlib.sha256(client_key).digest()
        signature = hmac.digest(stored, auth.encode(), "sha256")
        proof = b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
        return await session.step(f"{without_proof},p={proof.decode()}".encode())

    answer = asyncio.run(run())
    assert session.done and session.principal == PRINCIPAL
    assert answer.startswith(b"v=")


@pytest.mark.parametrize(
    "rewrite",
    [
        # Only the client's nonce, without the server's part (a replay shape).
        lambda final, cn: final.split(",r=")[0] + f",r={cn}," + final.split(",", 2)[2],
        # The right length but someone else's server nonce.
        lambda final, cn: final.replace(",r=" + cn, ",r=" + cn + "X", 1),
        # A wrong proof.
        lambda final, cn: final.rsplit("p=", 1)[0] + "p=" + "A" * 44,
    ],
    ids=["client-nonce-only", "foreign-server-nonce", "wrong-proof"],
)
def test_scram_rejects_wrong_nonces_and_proofs(rewrite):
    with pytest.raises(SaslFailed):
        exchange("SCRAM-SHA-256", rewrite)


def test_scram_unknown_key_fails_at_the_proof_like_a_wrong_password():
    """An unknown user is led through the exchange with a made-up salt and refused at the
    proof with a wrong password's answer, so the first message reveals nothing."""
    with pytest.raises(SaslFailed) as unknown:
        exchange("SCRAM-SHA-256", user="MRKNOPE")
    with pytest.raises(SaslFailed) as wrong:
        exchange("SCRAM-SHA-256", lambda final, cn: final.rsplit("p=", 1)[0] + "p=" + "A" * 44)
    assert str(unknown.value) == str(wrong.value)


def test_the_made_up_salt_is_the_same_every_time_and_sized_like_a_real_one():
    from data_plane.broker.sasl import fake_credentials

    one = fake_credentials(b"secret", "MRKNOPE", "SCRAM-SHA-256", 4096)
    assert one == fake_credentials(b"secret", "MRKNOPE", "SCRAM-SHA-256", 4096)
    assert one[0] != fake_credentials(b"secret", "MRKOTHER", "SCRAM-SHA-256", 4096)[0]
    assert one[0] != fake_credentials(b"other secret", "MRKNOPE", "SCRAM-SHA-256", 4096)[0]
    assert (len(one[0]), len(one[1]), one[3]) == (32, 32, 4096)
