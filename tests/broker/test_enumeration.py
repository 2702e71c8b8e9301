"""Without credentials, the broker and the REST API must not tell which keys exist."""

from __future__ import annotations

import pytest
import scramp

from data_plane.protocol.errors import ErrorCode
from tests.broker.test_wire import SASL_AUTH, SASL_HANDSHAKE, RawClient

pytestmark = pytest.mark.django_db

MECHANISM = "SCRAM-SHA-256"


def scram_attempt(kafka, user, password):
    """(server-first message or None, error code and message of the exchange's end)."""
    client = RawClient(kafka)
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})["error_code"] == 0
    scram = scramp.ScramClient([MECHANISM], user, password)
    first = client.request(SASL_AUTH, 2, {"auth_bytes": scram.get_client_first().encode()})
    if first["error_code"] != ErrorCode.NONE:
        client.close()
        return None, (first["error_code"], first["error_message"])
    server_first = bytes(first["auth_bytes"]).decode()
    scram.set_server_first(server_first)
    final = client.request(SASL_AUTH, 2, {"auth_bytes": scram.get_client_final().encode()})
    client.close()
    return server_first, (final["error_code"], final["error_message"])


def attrs(server_first):
    return dict(part.split("=", 1) for part in server_first.split(","))


def test_scram_answers_unknown_users_like_known_ones(kafka):
    known, answer_known = scram_attempt(kafka, kafka.admin_a.key_id, "wrong secret")
    unknown, answer_unknown = scram_attempt(kafka, "MRKNOSUCHKEY00000000", "wrong secret")
    internal, answer_internal = scram_attempt(kafka, f"__millrace-internal@{kafka.tenant_a}", "x")
    for name in (f"__millrace-proxy@{kafka.tenant_a}/MRKNOPE", "__millrace-internal@nope"):
        other, answer_other = scram_attempt(kafka, name, "x")
        assert other is not None and answer_other == answer_internal == answer_known
        assert len(attrs(other)["s"]) == len(attrs(internal)["s"])  # tenants stay unknown
    # Both get a server-first message with a salt and the same iteration count...
    assert known is not None and unknown is not None
    assert attrs(unknown)["i"] == attrs(known)["i"]
    assert len(attrs(unknown)["s"]) == len(attrs(known)["s"])
    # ...the unknown user's salt is the same on every attempt (a fresh one each time would
    # give it away), and both fail at the proof with the same answer.
    again, _ = scram_attempt(kafka, "MRKNOSUCHKEY00000000", "another guess")
    assert attrs(again)["s"] == attrs(unknown)["s"]
    assert answer_unknown == answer_known
    assert answer_known[0] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_an_unknown_key_costs_a_password_check_like_a_wrong_secret(kafka, monkeypatch):
    from control_plane.access import credentials, services

    calls = []
    real = credentials.check_password

    def counting(secret, encoded):
        calls.append(encoded)
        return real(secret, encoded)

    monkeypatch.setattr(credentials, "check_password", counting)
    credentials.verified_cache.clear()
    for key_id in (kafka.admin_a.key_id, "MRKNOSUCHKEY00000000"):
        calls.clear()
        with pytest.raises(services.KeyRejected) as refused:
            services.authenticate_api_key(key_id, "mrsec_wrong")
        assert str(refused.value) == "invalid API key or secret"
        assert len(calls) == 1, key_id  # one hash check either way


def test_init_producer_id_never_bumps_an_id_the_caller_names(kafka):
    """Without a transactional id Kafka hands out a new id whatever the request names, so
    one key cannot take over (fence) another's producer id by bumping its epoch."""
    theirs = RawClient(kafka)
    theirs.login(kafka.admin_b)
    victim = theirs.request(
        22,
        4,
        {
            "transactional_id": None,
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    theirs.close()
    assert victim["error_code"] == ErrorCode.NONE
    mine = RawClient(kafka)
    mine.login(kafka.admin_a)
    answer = mine.request(
        22,
        4,
        {
            "transactional_id": None,
            "transaction_timeout_ms": 60000,
            "producer_id": victim["producer_id"],
            "producer_epoch": 5,
        },
    )
    mine.close()
    assert answer["error_code"] == ErrorCode.NONE
    assert answer["producer_id"] != victim["producer_id"] and answer["producer_epoch"] == 0
