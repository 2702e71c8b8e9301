"""Kafka's precedence of client quotas (data_plane.client_quotas.resolve), step by step."""

from __future__ import annotations

from data_plane.client_quotas import ClientQuota, resolve

KEY = "producer_byte_rate"
# Most specific first, as Kafka's documentation lists them; each one's rate is its rank.
ORDER = [
    (("client-id", "cli"), ("user", "alice")),
    (("client-id", None), ("user", "alice")),
    (("user", "alice"),),
    (("client-id", "cli"), ("user", None)),
    (("client-id", None), ("user", None)),
    (("user", None),),
    (("client-id", "cli"),),
    (("client-id", None),),
]


def test_the_most_specific_quota_applies_and_its_bucket_names_the_request():
    quotas = [ClientQuota(entity, {KEY: float(rank)}) for rank, entity in enumerate(ORDER)]
    for rank in range(len(ORDER)):
        rate, bucket = resolve(quotas[rank:], "alice", "cli", KEY)
        assert rate == rank
        # Defaults are counted per actual name: each user (client) has its own bucket.
        assert all(name in ("alice", "cli") for _, name in bucket)
    assert resolve(quotas, "alice", "cli", "consumer_byte_rate") is None
    assert resolve([], "alice", "cli", KEY) is None


def test_other_names_fall_through_to_the_defaults():
    quotas = [ClientQuota(entity, {KEY: float(rank)}) for rank, entity in enumerate(ORDER)]
    assert resolve(quotas, "bob", "cli", KEY) == (3.0, (("client-id", "cli"), ("user", "bob")))
    assert resolve(quotas, "bob", "other", KEY) == (
        4.0,
        (("client-id", "other"), ("user", "bob")),
    )
