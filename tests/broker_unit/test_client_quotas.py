"""DescribeClientQuotas and AlterClientQuotas in-process (the in-memory store, no sockets),
and the broker throttling a principal over its client quota."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from data_plane.acl import Operation, ResourceType
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages import alter_client_quotas, describe_client_quotas, produce
from tests.broker_unit import test_handlers
from tests.broker_unit.test_handlers import batch, call, principal_of

E = ErrorCode
world = test_handlers.world  # the in-process broker's fixture
DESCRIBE = (Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
ALTER = (Operation.ALTER_CONFIGS, ResourceType.CLUSTER)


def alter(services, principal, entries, validate_only=False, version=1) -> list[dict[str, Any]]:
    body = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [
                    {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                    for k, v in ops.items()
                ],
            }
            for entity, ops in entries
        ],
        "validate_only": validate_only,
    }
    wire = alter_client_quotas.REQUEST.decode(
        alter_client_quotas.REQUEST.encode(body, version), version
    )
    got = call(services, principal, alter_client_quotas.KEY, version, wire)
    answer = alter_client_quotas.RESPONSE.decode(
        alter_client_quotas.RESPONSE.encode(got, version), version
    )
    return answer["entries"]


def describe(services, principal, components=(), strict=False, version=1) -> dict[str, Any]:
    body = {
        "components": [
            {"entity_type": t, "match_type": m, "match": name} for t, m, name in components
        ],
        "strict": strict,
    }
    got = call(services, principal, describe_client_quotas.KEY, version, body)
    return describe_client_quotas.RESPONSE.decode(
        describe_client_quotas.RESPONSE.encode(got, version), version
    )


def entities(answer) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {
        tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]): {
            v["key"]: v["value"] for v in entry["values"]
        }
        for entry in answer["entries"]
    }


ALICE = (("user", "alice"),)
DEFAULT_USER = (("user", None),)
ALICE_CLI = (("client-id", "cli"), ("user", "alice"))
CLI = (("client-id", "cli"),)


def test_without_cluster_configs_acls_both_are_refused_and_nothing_changes(world):
    store, node, services, acme, _ = world
    app = principal_of(store, acme, (Operation.DESCRIBE, ResourceType.CLUSTER))
    asyncio.run(node.refresh_metadata())
    [entry] = alter(services, app, [(ALICE, {"producer_byte_rate": 100})])
    assert entry["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    answer = describe(services, app)
    assert answer["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    assert answer["entries"] is None
    assert store.snapshot().tenants[acme].client_quotas == ()


@pytest.mark.parametrize("version", [0, 1])
def test_alter_then_describe_with_every_match_type(world, version):
    store, node, services, acme, _ = world
    app = principal_of(store, acme, DESCRIBE, ALTER)
    asyncio.run(node.refresh_metadata())
    results = alter(
        services,
        app,
        [
            (ALICE, {"producer_byte_rate": 1000, "consumer_byte_rate": 2000}),
            (DEFAULT_USER, {"producer_byte_rate": 500}),
            (ALICE_CLI, {"consumer_byte_rate": 300}),
            (CLI, {"producer_byte_rate": 50}),
        ],
        version=version,
    )
    assert [r["error_code"] for r in results] == [E.NONE] * 4
    assert results[2]["entity"] == [
        {"entity_type": "client-id", "entity_name": "cli"},
        {"entity_type": "user", "entity_name": "alice"},
    ]
    everything = entities(describe(services, app, version=version))
    assert everything == {
        ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0},
        DEFAULT_USER: {"producer_byte_rate": 500.0},
        ALICE_CLI: {"consumer_byte_rate": 300.0},
        CLI: {"producer_byte_rate": 50.0},
    }
    exact = describe(services, app, [("user", 0, "alice")], version=version)
    assert set(entities(exact)) == {ALICE, ALICE_CLI}
    strict = describe(services, app, [("user", 0, "alice")], strict=True, version=version)
    assert set(entities(strict)) == {ALICE}
    default = describe(services, app, [("user", 1, None)], version=version)
    assert set(entities(default)) == {DEFAULT_USER}
    anyone = describe(services, app, [("user", 2, None)], strict=True, version=version)
    assert set(entities(anyone)) == {ALICE, DEFAULT_USER}
    both = describe(services, app, [("user", 2, None), ("client-id", 0, "cli")])
    assert set(entities(both)) == {ALICE_CLI}
    # Remove one key, then the last: an entity with no values is gone.
    alter(services, app, [(ALICE, {"consumer_byte_rate": None})])
    alter(services, app, [(CLI, {"producer_byte_rate": None})])
    after = entities(describe(services, app))
    assert after[ALICE] == {"producer_byte_rate": 1000.0}
    assert CLI not in after
    assert any(e["action"] == "tenant.alter_client_quotas" for e in store.audit_events)


def test_a_tenant_never_sees_or_touches_another_tenants_quotas(world):
    store, node, services, acme, globex = world
    ours = principal_of(store, acme, DESCRIBE, ALTER)
    theirs = principal_of(store, globex, DESCRIBE, ALTER)
    asyncio.run(node.refresh_metadata())
    alter(services, theirs, [((("user", "app"),), {"producer_byte_rate": 64})])
    assert entities(describe(services, ours)) == {}
    assert entities(describe(services, ours, [("user", 0, "app")])) == {}
    alter(services, ours, [((("user", "app"),), {"producer_byte_rate": 128})])
    assert entities(describe(services, theirs)) == {(("user", "app"),): {"producer_byte_rate": 64}}
    assert entities(describe(services, ours)) == {(("user", "app"),): {"producer_byte_rate": 128}}


def test_the_tenants_limits_are_the_ceiling(world):
    store, node, services, _, _ = world
    small = store.add_tenant("small", produce_byte_rate=1000, fetch_byte_rate=2000)
    app = principal_of(store, small, DESCRIBE, ALTER)
    asyncio.run(node.refresh_metadata())
    over_produce, over_fetch, at_limit = alter(
        services,
        app,
        [
            (ALICE, {"producer_byte_rate": 1001}),
            (DEFAULT_USER, {"consumer_byte_rate": 2001}),
            (CLI, {"producer_byte_rate": 1000, "consumer_byte_rate": 2000}),
        ],
    )
    assert over_produce["error_code"] == E.POLICY_VIOLATION
    assert "1000 bytes/s" in over_produce["error_message"]
    assert over_fetch["error_code"] == E.POLICY_VIOLATION
    assert "2000 bytes/s" in over_fetch["error_message"]
    assert at_limit["error_code"] == E.NONE
    assert set(entities(describe(services, app))) == {CLI}


@pytest.mark.parametrize(
    ("entity", "ops", "message"),
    [
        (ALICE, {"request_percentage": 50}, "not enforced"),
        (ALICE, {"controller_mutation_rate": 5}, "not enforced"),
        (ALICE, {"no_such_key": 5}, "unknown quota key"),
        (ALICE, {"producer_byte_rate": 0}, "positive"),
        ((("ip", "10.0.0.1"),), {"producer_byte_rate": 5}, "ip quotas"),
        ((("group", "g"),), {"producer_byte_rate": 5}, "unknown entity type"),
        ((), {"producer_byte_rate": 5}, "names no user"),
        ((("user", "<default>"),), {"producer_byte_rate": 5}, "invalid user name"),
    ],
)
def test_invalid_entries_are_refused_one_by_one(world, entity, ops, message):
    store, node, services, acme, _ = world
    app = principal_of(store, acme, DESCRIBE, ALTER)
    asyncio.run(node.refresh_metadata())
    bad, good = alter(services, app, [(entity, ops), (CLI, {"producer_byte_rate": 10})])
    assert bad["error_code"] == E.INVALID_REQUEST
    assert message in bad["error_message"]
    assert good["error_code"] == E.NONE
    assert set(entities(describe(services, app))) == {CLI}


def test_validate_only_checks_and_changes_nothing(world):
    store, node, services, acme, _ = world
    app = principal_of(store, acme, DESCRIBE, ALTER)
    asyncio.run(node.refresh_metadata())
    ok, refused = alter(
        services,
        app,
        [(ALICE, {"producer_byte_rate": 10}), (CLI, {"request_percentage": 10})],
        validate_only=True,
    )
    assert (ok["error_code"], refused["error_code"]) == (E.NONE, E.INVALID_REQUEST)
    assert entities(describe(services, app)) == {}


def test_describe_refuses_an_invalid_filter(world):
    store, node, services, acme, _ = world
    app = principal_of(store, acme, DESCRIBE)
    asyncio.run(node.refresh_metadata())
    answer = describe(services, app, [("ip", 2, None)])
    assert answer["error_code"] == E.INVALID_REQUEST
    assert "ip" in answer["error_message"]
    answer = describe(services, app, [("user", 0, None)])
    assert answer["error_code"] == E.INVALID_REQUEST


def produce_bytes(services, principal, records: bytes) -> int:
    answer = call(
        services,
        principal,
        produce.KEY,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": "orders", "partition_data": [{"index": 0, "records": records}]}
            ],
        },
    )
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == E.NONE
    return int(answer["throttle_time_ms"])


@pytest.mark.parametrize(
    "entity",
    [
        (("user", "app"),),
        (("user", None),),
        (("client-id", "unit-test"), ("user", "app")),
        (("client-id", None),),
    ],
)
def test_a_principal_over_its_client_quota_is_throttled(world, entity):
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    app = principal_of(store, acme, DESCRIBE, ALTER, (Operation.WRITE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    records = batch(3)
    # Well inside the tenant's 10 MiB/s: no throttle before the client quota exists.
    assert produce_bytes(services, app, records) == 0
    [result] = alter(services, app, [(entity, {"producer_byte_rate": 10})])
    assert result["error_code"] == E.NONE
    # The quota applies at once (no broker restart): one batch is seconds of 10 bytes/s.
    assert produce_bytes(services, app, records) > 0


def test_the_most_specific_quota_wins(world):
    store, node, services, acme, _ = world
    store.add_topic(acme, "orders")
    app = principal_of(store, acme, DESCRIBE, ALTER, (Operation.WRITE, ResourceType.TOPIC))
    asyncio.run(node.refresh_metadata())
    # A generous quota on the user itself beats a tiny default-user one.
    alter(
        services,
        app,
        [
            ((("user", None),), {"producer_byte_rate": 10}),
            ((("user", "app"),), {"producer_byte_rate": 10_000_000}),
        ],
    )
    assert produce_bytes(services, app, batch(3)) == 0
    # A tiny one on (user, client id) beats the user's.
    alter(
        services, app, [((("client-id", "unit-test"), ("user", "app")), {"producer_byte_rate": 10})]
    )
    assert produce_bytes(services, app, batch(3)) > 0
