"""ACLs: DescribeAcls, CreateAcls, DeleteAcls (inside the caller's tenant)."""

from __future__ import annotations

import logging

from data_plane.acl import (
    AclBinding,
    InvalidAclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from data_plane.broker.handlers.context import (
    E,
    Handler,
    RequestContext,
    blocking,
)
from data_plane.broker.ports import AdminError
from data_plane.protocol import bodies
from data_plane.protocol.messages import create_acls as create_acls_api
from data_plane.protocol.messages import delete_acls as delete_acls_api
from data_plane.protocol.messages import describe_acls as describe_acls_api

logger = logging.getLogger("millrace.broker")


_RESOURCE_BY_CODE = {t.kafka_code: t for t in ResourceType}
_PATTERN_BY_CODE = {p.kafka_code: p for p in PatternType}
_OPERATION_BY_CODE = {o.kafka_code: o for o in Operation}
_PERMISSION_BY_CODE = {p.kafka_code: p for p in Permission}
ANY, MATCH = 1, 2


def _filter_matches(
    f: bodies.DescribeAclsRequest | bodies.DeleteAclsRequestFilters, binding: AclBinding
) -> bool:
    """Whether a DescribeAcls request or a DeleteAcls filter (the same fields) matches."""
    rtype = f["resource_type_filter"]
    if rtype != ANY and _RESOURCE_BY_CODE.get(rtype) is not binding.resource_type:
        return False
    name = f["resource_name_filter"]
    # v0 knows literal patterns only (the field is from v1).
    pattern = f.get("pattern_type_filter", PatternType.LITERAL.kafka_code)
    if pattern == MATCH:
        if name is not None and not binding.covers_resource(binding.resource_type, name):
            return False
    else:
        if pattern != ANY and _PATTERN_BY_CODE.get(pattern) is not binding.pattern_type:
            return False
        if name is not None and name != binding.resource_name:
            return False
    principal = f["principal_filter"]
    if principal is not None and principal != binding.principal:
        return False
    host = f["host_filter"]
    if host is not None and host != binding.host:
        return False
    op = f["operation"]
    if op != ANY and _OPERATION_BY_CODE.get(op) is not binding.operation:
        return False
    perm = f["permission_type"]
    return perm == ANY or _PERMISSION_BY_CODE.get(perm) is binding.permission


def _acl_description(b: AclBinding) -> bodies.DescribeAclsResponseAcls:
    return {
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.kafka_code,
        "permission_type": b.permission.kafka_code,
    }


async def handle_describe_acls(
    ctx: RequestContext, req: bodies.DescribeAclsRequest
) -> bodies.DescribeAclsResponse:
    if not ctx.may_cluster(Operation.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "resources": [],
        }
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for binding in ctx.snapshot.tenant_acls(ctx.principal.tenant_id):
        if _filter_matches(req, binding):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            grouped.setdefault(key, []).append(binding)
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "error_message": None,
        "resources": [
            {
                "resource_type": rt.kafka_code,
                "resource_name": name,
                "pattern_type": pt.kafka_code,
                "acls": [_acl_description(b) for b in bindings],
            }
            for (rt, name, pt), bindings in grouped.items()
        ],
    }


async def handle_create_acls(
    ctx: RequestContext, req: bodies.CreateAclsRequest
) -> bodies.CreateAclsResponse:
    svc = ctx.services
    results: list[bodies.CreateAclsResponseResults] = []
    allowed = ctx.may_cluster(Operation.ALTER)
    for c in req["creations"]:
        entry: bodies.CreateAclsResponseResults = {"error_code": E.NONE, "error_message": None}
        results.append(entry)
        if not allowed:
            entry["error_code"] = E.CLUSTER_AUTHORIZATION_FAILED
            continue
        try:
            binding = AclBinding(
                principal=c["principal"],
                resource_type=_RESOURCE_BY_CODE[c["resource_type"]],
                pattern_type=_PATTERN_BY_CODE[
                    c.get("resource_pattern_type", PatternType.LITERAL.kafka_code)
                ],
                resource_name=c["resource_name"],
                operation=_OPERATION_BY_CODE[c["operation"]],
                permission=_PERMISSION_BY_CODE[c["permission_type"]],
                host=c["host"],
            )
            binding.validate()
            await blocking(svc.admin.create_acl, ctx.principal, binding)
        except (KeyError, InvalidAclBinding) as exc:
            entry["error_code"], entry["error_message"] = E.INVALID_REQUEST, str(exc)
        except AdminError as exc:
            entry["error_code"], entry["error_message"] = E.INVALID_REQUEST, exc.message
    await svc.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "results": results}


async def handle_delete_acls(
    ctx: RequestContext, req: bodies.DeleteAclsRequest
) -> bodies.DeleteAclsResponse:
    svc = ctx.services
    allowed = ctx.may_cluster(Operation.ALTER)
    results: list[bodies.DeleteAclsResponseFilterResults] = []
    for f in req["filters"]:
        if not allowed:
            results.append(
                {
                    "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": None,
                    "matching_acls": [],
                }
            )
            continue
        deleted = await blocking(
            svc.admin.delete_acls, ctx.principal, lambda binding, f=f: _filter_matches(f, binding)
        )
        results.append(
            {
                "error_code": E.NONE,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": E.NONE,
                        "error_message": None,
                        "resource_type": d.resource_type.kafka_code,
                        "resource_name": d.resource_name,
                        "pattern_type": d.pattern_type.kafka_code,
                        **_acl_description(d),
                    }
                    for d in deleted
                ],
            }
        )
    await svc.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "filter_results": results}


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    describe_acls_api.KEY: handle_describe_acls,
    create_acls_api.KEY: handle_create_acls,
    delete_acls_api.KEY: handle_delete_acls,
}
