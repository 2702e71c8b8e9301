"""Topic configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs."""

from __future__ import annotations

import logging

from data_plane.acl import (
    Operation,
)
from data_plane.broker.handlers.context import (
    E,
    Handler,
    RequestContext,
    T,
    blocking,
)
from data_plane.broker.ports import AdminError
from data_plane.metadata.model import TopicInfo
from data_plane.protocol import bodies
from data_plane.protocol.messages import alter_configs as alter_configs_api
from data_plane.protocol.messages import describe_configs as describe_configs_api
from data_plane.protocol.messages import incremental_alter_configs as incremental_alter_configs_api
from data_plane.topic_config import (
    TOPIC_CONFIGS,
    effective_configs,
)

logger = logging.getLogger("millrace.broker")


TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
CONFIG_TYPES = {bool: 1, str: 2, int: 5}  # BOOLEAN, STRING, LONG
SOURCE_TOPIC, SOURCE_DEFAULT = 1, 5


async def handle_describe_configs(
    ctx: RequestContext, req: bodies.DescribeConfigsRequest
) -> bodies.DescribeConfigsResponse:
    results: list[bodies.DescribeConfigsResponseResults] = []
    for r in req["resources"]:
        configs: list[bodies.DescribeConfigsResponseConfigs] = []
        entry: bodies.DescribeConfigsResponseResults = {
            "error_code": E.NONE,
            "error_message": None,
            "resource_type": r["resource_type"],
            "resource_name": r["resource_name"],
            "configs": configs,
        }
        results.append(entry)
        if r["resource_type"] == BROKER_RESOURCE:
            continue
        if r["resource_type"] != TOPIC_RESOURCE:
            entry["error_code"] = E.INVALID_REQUEST
            continue
        topic = ctx.topic(r["resource_name"])
        if topic is None:
            entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
        elif not ctx.may(Operation.DESCRIBE_CONFIGS, T, topic.name):
            entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
        else:
            wanted = r["configuration_keys"]
            values = effective_configs(topic.configs)
            for name, definition in TOPIC_CONFIGS.items():
                if wanted is not None and name not in wanted:
                    continue
                overridden = name in topic.configs
                configs.append(
                    {
                        "name": name,
                        "value": definition.to_kafka_string(values[name]),
                        "read_only": False,
                        "config_source": SOURCE_TOPIC if overridden else SOURCE_DEFAULT,
                        "is_default": not overridden,  # v0's form of config_source
                        "is_sensitive": False,
                        "synonyms": [],
                        "config_type": CONFIG_TYPES.get(definition.kind, 2),
                        "documentation": definition.doc
                        if req.get("include_documentation")
                        else None,
                    }
                )
    return {"throttle_time_ms": 0, "results": results}


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _config_target(
    ctx: RequestContext,
    r: bodies.AlterConfigsRequestResources | bodies.IncrementalAlterConfigsRequestResources,
) -> tuple[bodies.AlterConfigsResponseResponses, TopicInfo | None]:
    """The response entry for one alter-configs resource and, if alterable, its topic.
    (AlterConfigs and IncrementalAlterConfigs entries have the same fields.)"""
    entry: bodies.AlterConfigsResponseResponses = {
        "error_code": E.NONE,
        "error_message": None,
        "resource_type": r["resource_type"],
        "resource_name": r["resource_name"],
    }
    if r["resource_type"] != TOPIC_RESOURCE:
        entry["error_code"] = E.INVALID_REQUEST
        entry["error_message"] = "only topic configs can be altered"
        return entry, None
    topic = ctx.topic(r["resource_name"])
    if topic is None:
        entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
    elif not ctx.may(Operation.ALTER_CONFIGS, T, topic.name):
        entry["error_code"] = E.TOPIC_AUTHORIZATION_FAILED
    return entry, topic if entry["error_code"] == E.NONE else None


async def _apply_config_changes(
    ctx: RequestContext,
    entry: bodies.AlterConfigsResponseResponses,
    topic: TopicInfo,
    changes: dict[str, str | None],
    validate_only: bool,
) -> None:
    try:
        await blocking(
            ctx.services.admin.alter_topic_configs,
            ctx.principal,
            topic.name,
            changes,
            validate_only,
        )
    except AdminError as exc:
        entry["error_code"], entry["error_message"] = exc.error_code, exc.message


async def handle_incremental_alter_configs(
    ctx: RequestContext, req: bodies.IncrementalAlterConfigsRequest
) -> bodies.IncrementalAlterConfigsResponse:
    responses: list[bodies.IncrementalAlterConfigsResponseResponses] = []
    for r in req["resources"]:
        entry, topic = _config_target(ctx, r)
        responses.append(entry)
        if topic is None:
            continue
        current = effective_configs(topic.configs)
        changes: dict[str, str | None] = {}
        for c in r["configs"]:
            op, name, value = c["config_operation"], c["name"], c["value"]
            if op == SET:
                changes[name] = value
            elif op == DELETE:
                changes[name] = None
            elif op in (APPEND, SUBTRACT) and name == "cleanup.policy":
                parts = set(str(current[name]).split(",")) - {""}
                delta = set((value or "").split(",")) - {""}
                parts = parts | delta if op == APPEND else parts - delta
                changes[name] = ",".join(sorted(parts)) or None
            else:
                entry["error_code"] = E.INVALID_CONFIG
                entry["error_message"] = f"operation {op} does not apply to {name}"
                break
        if entry["error_code"] == E.NONE:
            await _apply_config_changes(ctx, entry, topic, changes, req["validate_only"])
    await ctx.services.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "responses": responses}


async def handle_alter_configs(
    ctx: RequestContext, req: bodies.AlterConfigsRequest
) -> bodies.AlterConfigsResponse:
    """Legacy AlterConfigs: the given configs become the topic's whole set of overrides."""
    responses: list[bodies.AlterConfigsResponseResponses] = []
    for r in req["resources"]:
        entry, topic = _config_target(ctx, r)
        responses.append(entry)
        if topic is None:
            continue
        given = {c["name"]: c["value"] for c in r["configs"]}
        changes: dict[str, str | None] = {name: None for name in topic.configs if name not in given}
        changes.update(given)
        await _apply_config_changes(ctx, entry, topic, changes, req["validate_only"])
    await ctx.services.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "responses": responses}


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    describe_configs_api.KEY: handle_describe_configs,
    alter_configs_api.KEY: handle_alter_configs,
    incremental_alter_configs_api.KEY: handle_incremental_alter_configs,
}
