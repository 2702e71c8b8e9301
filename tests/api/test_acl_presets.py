"""ACL presets: a service account and the usual rights in one step, as ordinary ACLs.

The oracle for what a preset allows is the authorizer itself (data_plane.acl.authorize)
over the ACLs the REST API lists afterwards, and the ACL checker's answer; the broker test
(tests/broker/test_acl_presets.py) checks the effect with real clients.
"""

from __future__ import annotations

import pytest

from control_plane.access.models import Acl, ServiceAccount
from control_plane.audit.models import AuditEvent
from data_plane.acl import AclBinding, Operation, PatternType, Permission, ResourceType, authorize
from tests.conftest import session_client

T = "/api/v1/tenants/acme"


def bindings(rows: list[dict]) -> list[AclBinding]:
    return [
        AclBinding(
            principal=r["principal"],
            resource_type=ResourceType(r["resource_type"]),
            pattern_type=PatternType(r["pattern_type"]),
            resource_name=r["resource_name"],
            operation=Operation(r["operation"]),
            permission=Permission(r["permission"]),
            host=r["host"],
        )
        for r in rows
    ]


def allowed(rows, op: str, rtype: str, name: str) -> bool:
    return authorize(
        bindings(rows),
        principal="User:app",
        host="10.0.0.1",
        operation=Operation(op),
        resource_type=ResourceType(rtype),
        resource_name=name,
    ).allowed


def create(client, **preset):
    return client.post(
        f"{T}/service-accounts/", {"name": "app", "acl_preset": preset}, format="json"
    )


def listed(client) -> list[dict]:
    return client.get(f"{T}/acls/", {"principal": "User:app"}).json()["results"]


def test_producer_preset_writes_the_topics_and_nothing_else(owner, tenant_a):
    client = session_client(owner)
    made = create(client, preset="producer", topic="orders-", topic_pattern="prefixed")
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["name"] == "app" and len(body["acls"]) == 3
    rows = listed(client)
    assert sorted(r["id"] for r in rows) == sorted(a["id"] for a in body["acls"])
    assert allowed(rows, "write", "topic", "orders-eu")
    assert allowed(rows, "describe", "topic", "orders-eu")
    assert allowed(rows, "idempotent_write", "cluster", "kafka-cluster")
    assert not allowed(rows, "write", "topic", "payments")
    assert not allowed(rows, "read", "topic", "orders-eu")
    assert not allowed(rows, "read", "group", "anything")
    # Each ACL is audited like one made by hand.
    assert AuditEvent.objects.filter(action="acl.create", tenant=tenant_a).count() == 3


def test_consumer_preset_reads_the_topics_in_its_groups(owner):
    client = session_client(owner)
    made = create(client, preset="consumer", topic="orders", group="billing-")
    assert made.status_code == 201, made.content
    rows = listed(client)
    assert allowed(rows, "read", "topic", "orders")
    assert not allowed(rows, "read", "topic", "orders-eu")  # literal by default
    assert allowed(rows, "read", "group", "billing-nightly")  # groups: a prefix by default
    assert not allowed(rows, "read", "group", "other")
    assert not allowed(rows, "write", "topic", "orders")


def test_read_only_and_topic_admin_presets(owner):
    client = session_client(owner)
    assert create(client, preset="read-only", topic="*").status_code == 201
    rows = listed(client)
    assert allowed(rows, "read", "topic", "anything")
    assert allowed(rows, "describe_configs", "topic", "anything")
    assert allowed(rows, "describe", "group", "g")
    assert allowed(rows, "describe", "cluster", "kafka-cluster")
    assert not allowed(rows, "read", "group", "g")  # may look, not join or commit
    assert not allowed(rows, "write", "topic", "anything")
    assert not allowed(rows, "alter_configs", "topic", "anything")

    other = client.post(
        f"{T}/service-accounts/",
        {
            "name": "ops",
            "acl_preset": {"preset": "topic-admin", "topic": "team-", "topic_pattern": "prefixed"},
        },
        format="json",
    )
    assert other.status_code == 201, other.content
    rows = client.get(f"{T}/acls/", {"principal": "User:ops"}).json()["results"]
    rows = [{**r, "principal": "User:app"} for r in rows]  # ask as the same principal name
    for op in ("create", "delete", "alter", "alter_configs", "write", "read"):
        assert allowed(rows, op, "topic", "team-x")
    assert not allowed(rows, "create", "topic", "other")


def test_transactional_presets_add_the_transactional_ids(owner):
    client = session_client(owner)
    made = create(
        client, preset="transactional-producer", topic="orders", transactional_id="orders-tx-"
    )
    assert made.status_code == 201, made.content
    rows = listed(client)
    assert len(rows) == 5
    assert allowed(rows, "write", "topic", "orders")
    assert allowed(rows, "idempotent_write", "cluster", "kafka-cluster")
    assert allowed(rows, "write", "transactional_id", "orders-tx-7")  # a prefix by default
    assert allowed(rows, "describe", "transactional_id", "orders-tx-7")
    assert not allowed(rows, "write", "transactional_id", "payments-tx")
    assert not allowed(rows, "read", "topic", "orders")
    assert not allowed(rows, "read", "group", "g")

    other = client.post(
        f"{T}/service-accounts/",
        {
            "name": "etl",
            "acl_preset": {
                "preset": "exactly-once",
                "topic": "etl-",
                "topic_pattern": "prefixed",
                "group": "etl",
                "group_pattern": "literal",
                "transactional_id": "etl-job",
                "transactional_id_pattern": "literal",
            },
        },
        format="json",
    )
    assert other.status_code == 201, other.content
    rows = client.get(f"{T}/acls/", {"principal": "User:etl"}).json()["results"]
    rows = [{**r, "principal": "User:app"} for r in rows]
    assert len(rows) == 8
    for op in ("read", "write", "describe"):
        assert allowed(rows, op, "topic", "etl-in")
    assert allowed(rows, "read", "group", "etl") and not allowed(rows, "read", "group", "etl2")
    assert allowed(rows, "write", "transactional_id", "etl-job")
    assert not allowed(rows, "write", "transactional_id", "etl-job-2")  # literal
    assert allowed(rows, "idempotent_write", "cluster", "kafka-cluster")


@pytest.mark.parametrize(
    ("preset", "field", "message"),
    [
        ({"preset": "superuser", "topic": "x"}, "acl_preset.preset", "superuser"),
        ({"preset": "consumer", "topic": "orders"}, "acl_preset.group", "needs a group"),
        (
            {"preset": "transactional-producer", "topic": "orders"},
            "acl_preset.transactional_id",
            "needs a transactional id",
        ),
        (
            {
                "preset": "exactly-once",
                "topic": "o",
                "group": "g",
                "transactional_id": "t",
                "transactional_id_pattern": "glob",
            },
            "acl_preset.transactional_id_pattern",
            "",
        ),
        ({"preset": "producer", "topic": ""}, "acl_preset.topic", ""),
        (
            {"preset": "producer", "topic": "x", "topic_pattern": "regex"},
            "acl_preset.topic_pattern",
            "",
        ),
    ],
)
def test_a_bad_preset_creates_nothing_and_says_why(owner, preset, field, message):
    client = session_client(owner)
    refused = create(client, **preset)
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert field in error["message"] or field in error["details"], error
    assert message in str(error)
    assert not ServiceAccount.objects.filter(name="app").exists()
    assert not Acl.objects.exists()
    # The next good request succeeds.
    assert create(client, preset="producer", topic="orders").status_code == 201


def test_a_preset_that_fails_halfway_leaves_no_account(owner, monkeypatch):
    from control_plane.access import presets
    from control_plane.core.errors import InvalidInput

    calls = []
    real = presets.services.create_acl

    def fail_on_second(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 2:
            raise InvalidInput("boom", field="resource_name")
        return real(*args, **kwargs)

    monkeypatch.setattr(presets.services, "create_acl", fail_on_second)
    refused = create(session_client(owner), preset="producer", topic="orders")
    assert refused.status_code == 400
    assert not ServiceAccount.objects.filter(name="app").exists()
    assert not Acl.objects.exists()


def test_without_a_preset_nothing_changes(owner):
    made = session_client(owner).post(f"{T}/service-accounts/", {"name": "app"}, format="json")
    assert made.status_code == 201 and made.json()["acls"] == []
    assert not Acl.objects.exists()
