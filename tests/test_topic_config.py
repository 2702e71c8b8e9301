"""Topic names and the typed topic config schema."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_plane.topic_config import (
    TOPIC_CONFIGS,
    InvalidConfig,
    InvalidTopicName,
    effective_configs,
    parse_config_value,
    topic_collision_key,
    validate_topic_configs,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-9", "x" * 249, "..."])
def test_legal_topic_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "x" * 250, "has space", "slash/", "ünï", "tab\t", "__internal", "0\n"]
)
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)


@given(st.text(max_size=260))
def test_name_rule_matches_kafka_regex(name):
    import re

    legal = (
        bool(re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", name))
        and name not in {".", ".."}
        and not name.startswith("__")
    )
    try:
        validate_topic_name(name)
        accepted = True
    except InvalidTopicName:
        accepted = False
    assert accepted is legal


def test_collision_key_folds_dot_and_underscore():
    assert topic_collision_key("a.b_c") == topic_collision_key("a_b.c")


def test_values_parse_from_json_and_kafka_strings():
    assert parse_config_value("retention.ms", 1000) == 1000
    assert parse_config_value("retention.ms", "-1") == -1
    assert parse_config_value("unclean.leader.election.enable", "true") is True
    assert parse_config_value("cleanup.policy", "compact, delete") == "delete,compact"
    assert parse_config_value("message.timestamp.type", "LogAppendTime") == "LogAppendTime"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", -2),
        ("retention.ms", 2**63),
        ("retention.ms", "soon"),
        ("retention.ms", True),
        ("retention.ms", 1.5),
        ("retention.bytes", -5),
        ("segment.bytes", 1024),
        ("segment.ms", 10),
        ("max.message.bytes", 0),
        ("min.insync.replicas", 0),
        ("cleanup.policy", "archive"),
        ("cleanup.policy", ""),
        ("message.timestamp.type", "Wallclock"),
        ("unclean.leader.election.enable", "yes"),
        ("no.such.config", 1),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(InvalidConfig) as info:
        parse_config_value(key, value)
    assert info.value.key == key


def test_min_insync_cannot_exceed_replication_factor():
    with pytest.raises(InvalidConfig) as info:
        validate_topic_configs({"min.insync.replicas": 3}, replication_factor=2)
    assert info.value.key == "min.insync.replicas"
    assert validate_topic_configs({"min.insync.replicas": "2"}, replication_factor=2) == {
        "min.insync.replicas": 2
    }


def test_every_default_is_valid_and_effective_configs_fill_defaults():
    for definition in TOPIC_CONFIGS.values():
        assert (
            definition.parse(definition.to_kafka_string(definition.default)) == definition.default
        )
    effective = effective_configs({"retention.ms": 5})
    assert effective["retention.ms"] == 5
    assert effective["cleanup.policy"] == "delete"
    assert set(effective) == set(TOPIC_CONFIGS)
