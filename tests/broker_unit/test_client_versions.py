"""The broker's fold of client versions (data_plane.broker.client_versions)."""

from __future__ import annotations

from data_plane.broker.client_versions import ClientVersions
from data_plane.metadata.model import Principal

APP = Principal(tenant_id=7, tenant_slug="acme", name="User:app", key_id="K1")
INTERNAL = Principal(tenant_id=7, tenant_slug="acme", name="User:svc", key_id="K2", internal=True)


def test_counts_fold_per_identity_and_version_until_drained():
    now = [100.0]
    fold = ClientVersions(clock=lambda: now[0])
    fold.add(APP, ("sarama", "1.22"), {("orders", 0, 2, True): 3, ("orders", 1, 3, True): 1}, 90.0)
    now[0] = 110.0
    fold.add(
        APP, ("sarama", "1.22"), {("orders", 0, 2, True): 2, ("orders", 0, 12, False): 1}, 95.0
    )
    fold.add(APP, ("", ""), {("orders", 0, 2, True): 4}, 95.0)  # no KIP-511 name: its own
    fold.add(INTERNAL, ("millrace", "0.1"), {("x", 0, 9, True): 1}, 95.0)  # not a tenant's
    got = {(u.software_name, u.api_key, u.api_version, u.served): u for u in fold.drain()}
    assert set(got) == {
        ("sarama", 0, 2, True),
        ("sarama", 1, 3, True),
        ("sarama", 0, 12, False),
        ("", 0, 2, True),
    }
    produce = got[("sarama", 0, 2, True)]
    assert (produce.requests, produce.first_seen, produce.last_seen) == (5, 90.0, 110.0)
    assert (produce.tenant_id, produce.principal, produce.client_id) == (7, "User:app", "orders")
    assert fold.drain() == []  # drained: the next report starts again


def test_undelivered_rows_are_restored_and_the_fold_is_bounded():
    fold = ClientVersions(clock=lambda: 100.0, max_entries=2)
    fold.add(APP, ("a", "1"), {("c", 0, v, True): 1 for v in range(3)}, 50.0)
    assert fold.dropped == 1  # the third (API, version) did not fit
    rows = fold.drain()
    assert len(rows) == 2
    fold.add(APP, ("a", "1"), {("c", 0, 0, True): 5}, 60.0)
    fold.restore(rows)  # a report failed: its rows come back, summed with the new ones
    again = {u.api_version: u for u in fold.drain()}
    assert again[0].requests == 6 and again[0].first_seen == 50.0
    assert again[1].requests == 1


def test_long_client_ids_and_names_are_cut():
    fold = ClientVersions()
    fold.add(APP, ("n" * 500, "v" * 500), {("c" * 1000, 3, 12, True): 1}, 1.0)
    (use,) = fold.drain()
    assert (len(use.client_id), len(use.software_name), len(use.software_version)) == (
        255,
        64,
        64,
    )
