"""The authorizer as a matrix: patterns, allow vs deny, wildcards, implication, default deny."""

from __future__ import annotations

import pytest

from data_plane.acl import (
    AclBinding,
    InvalidAclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
O = Operation  # noqa: E741


def acl(principal, rtype, ptype, name, op, perm=ALLOW, host="*"):
    return AclBinding(principal, rtype, ptype, name, op, perm, host)


def may(bindings, op, rtype=T, name="orders", principal="User:app", host="10.0.0.1"):
    return authorize(
        bindings,
        principal=principal,
        host=host,
        operation=op,
        resource_type=rtype,
        resource_name=name,
    ).allowed


def test_default_deny_with_no_acls():
    for op in O:
        if op is not O.ALL:
            assert not may([], op)


@pytest.mark.parametrize(
    ("ptype", "acl_name", "resource", "expected"),
    [
        (LIT, "orders", "orders", True),
        (LIT, "orders", "orders-eu", False),
        (LIT, "orders", "order", False),
        (LIT, "*", "anything", True),
        (PRE, "orders", "orders", True),
        (PRE, "orders", "orders-eu", True),
        (PRE, "orders", "order", False),
        (PRE, "ord", "payments", False),
        (PRE, "*", "orders", False),  # a prefixed "*" is a literal prefix, not a wildcard
    ],
)
def test_literal_and_prefixed_patterns(ptype, acl_name, resource, expected):
    bindings = [acl("User:app", T, ptype, acl_name, O.READ)]
    assert may(bindings, O.READ, name=resource) is expected


def test_resource_type_must_match():
    bindings = [acl("User:app", G, LIT, "orders", O.READ)]
    assert not may(bindings, O.READ, T, "orders")
    assert may(bindings, O.READ, G, "orders")


@pytest.mark.parametrize(
    ("principal", "expected"),
    [("User:app", True), ("User:other", False)],
)
def test_principal_match_and_wildcard(principal, expected):
    assert may([acl("User:app", T, LIT, "orders", O.READ)], O.READ, principal=principal) is expected
    assert may([acl("User:*", T, LIT, "orders", O.READ)], O.READ, principal=principal)


def test_host_match():
    bindings = [acl("User:app", T, LIT, "orders", O.READ, host="10.0.0.1")]
    assert may(bindings, O.READ, host="10.0.0.1")
    assert not may(bindings, O.READ, host="10.0.0.2")


@pytest.mark.parametrize("deny_pattern", [(LIT, "orders"), (PRE, "ord"), (LIT, "*")])
def test_deny_wins_over_allow(deny_pattern):
    ptype, name = deny_pattern
    bindings = [
        acl("User:app", T, LIT, "orders", O.ALL),
        acl("User:*", T, ptype, name, O.READ, DENY),
    ]
    assert not may(bindings, O.READ)
    assert may(bindings, O.WRITE)  # the deny covers READ only


def test_deny_all_denies_every_operation():
    bindings = [
        acl("User:app", T, LIT, "orders", O.ALL),
        acl("User:app", T, LIT, "orders", O.ALL, DENY),
    ]
    for op in (O.READ, O.WRITE, O.DESCRIBE, O.ALTER_CONFIGS):
        assert not may(bindings, op)


@pytest.mark.parametrize("granted", [O.READ, O.WRITE, O.DELETE, O.ALTER, O.DESCRIBE])
def test_describe_is_implied(granted):
    assert may([acl("User:app", T, LIT, "orders", granted)], O.DESCRIBE)


@pytest.mark.parametrize("granted", [O.CREATE, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS])
def test_describe_not_implied_by_others(granted):
    assert not may([acl("User:app", T, LIT, "orders", granted)], O.DESCRIBE)


def test_describe_configs_implied_by_alter_configs_only():
    assert may([acl("User:app", T, LIT, "orders", O.ALTER_CONFIGS)], O.DESCRIBE_CONFIGS)
    assert not may([acl("User:app", T, LIT, "orders", O.ALTER)], O.DESCRIBE_CONFIGS)


def test_implication_does_not_apply_to_deny():
    bindings = [
        acl("User:app", T, LIT, "orders", O.DESCRIBE),
        acl("User:app", T, LIT, "orders", O.READ, DENY),
    ]
    assert may(bindings, O.DESCRIBE)
    assert not may(bindings, O.READ)


def test_write_does_not_imply_read():
    assert not may([acl("User:app", T, LIT, "orders", O.WRITE)], O.READ)


def test_all_allows_every_operation():
    bindings = [acl("User:app", T, PRE, "", O.ALL)]
    for op in O:
        if op is not O.ALL:
            assert may(bindings, op, name="x")


def test_decision_names_the_rule():
    deny = acl("User:*", T, PRE, "secret", O.READ, DENY)
    decision = authorize(
        [acl("User:app", T, LIT, "*", O.READ), deny],
        principal="User:app",
        host="h",
        operation=O.READ,
        resource_type=T,
        resource_name="secret-stuff",
    )
    assert not decision.allowed
    assert decision.binding == deny
    assert "denied by deny read" in decision.reason
    nothing = authorize(
        [], principal="User:app", host="h", operation=O.READ, resource_type=T, resource_name="x"
    )
    assert "default deny" in nothing.reason


def test_authorizing_all_is_a_programming_error():
    with pytest.raises(ValueError):
        authorize(
            [], principal="User:a", host="h", operation=O.ALL, resource_type=T, resource_name="x"
        )


@pytest.mark.parametrize(
    ("binding", "field"),
    [
        (acl("app", T, LIT, "x", O.READ), "principal"),
        (acl("User:", T, LIT, "x", O.READ), "principal"),
        (acl("User:a", G, LIT, "g", O.WRITE), "operation"),
        (acl("User:a", C, LIT, "other", O.ALTER), "resource_name"),
        (acl("User:a", C, PRE, "kafka-cluster", O.ALTER), "resource_name"),
        (acl("User:a", T, PRE, "*", O.READ), "resource_name"),
        (acl("User:a", T, LIT, "", O.READ), "resource_name"),
    ],
)
def test_invalid_bindings_are_rejected(binding, field):
    with pytest.raises(InvalidAclBinding) as info:
        binding.validate()
    assert info.value.field == field
