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


def test_idle_buckets_are_pruned_without_changing_any_answer():
    from data_plane.broker.quotas import ByteRateQuotas

    now = [0.0]
    quotas = ByteRateQuotas(clock=lambda: now[0])
    quotas.prune_above = 3
    for client in range(3):
        quotas.record_bucket(("t", client), 10, 10.0)  # a second ahead each
    assert quotas.record_bucket("busy", 30, 10.0) == 2000  # 3 s ahead, 1 s of burst
    now[0] = 1.5  # the three clients' clocks are behind now; "busy" is still ahead
    assert quotas.record_bucket("busy", 10, 10.0) == 1500
    assert len(quotas._tat) == 1
