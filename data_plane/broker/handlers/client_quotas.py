"""Client quotas (KIP-546): DescribeClientQuotas and AlterClientQuotas.

A tenant's quotas are on its own users (service accounts, named without ``User:``) and
client ids; another tenant's are not visible or alterable, as its names do not exist here.
Kafka's authorizer asks for DescribeConfigs / AlterConfigs on the cluster; so does Millrace,
on the tenant's cluster resource (its ACLs, or an operator acting in the tenant). A byte rate
above the tenant's own limit is refused with POLICY_VIOLATION; the broker enforces both.
"""

from __future__ import annotations

from data_plane import client_quotas as cq
from data_plane.acl import Operation
from data_plane.broker.handlers.context import E, Handler, RequestContext, blocking
from data_plane.broker.ports import AdminError
from data_plane.protocol import bodies
from data_plane.protocol.messages import alter_client_quotas as alter_client_quotas_api
from data_plane.protocol.messages import describe_client_quotas as describe_client_quotas_api


async def handle_describe_client_quotas(
    ctx: RequestContext, req: bodies.DescribeClientQuotasRequest
) -> bodies.DescribeClientQuotasResponse:
    answer: bodies.DescribeClientQuotasResponse = {
        "throttle_time_ms": 0,
        "error_code": E.NONE,
        "error_message": None,
        "entries": None,
    }
    if not ctx.may_cluster(Operation.DESCRIBE_CONFIGS):
        answer["error_code"] = E.CLUSTER_AUTHORIZATION_FAILED
        return answer
    components = [
        cq.Component(c["entity_type"], c["match_type"], c["match"]) for c in req["components"]
    ]
    try:
        cq.check_filter(components)
    except cq.InvalidQuota as exc:
        answer["error_code"], answer["error_message"] = E.INVALID_REQUEST, str(exc)
        return answer
    tenant = ctx.snapshot.tenants.get(ctx.principal.tenant_id)
    quotas = tenant.client_quotas if tenant is not None else ()
    answer["entries"] = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in q.entity],
            "values": [{"key": k, "value": v} for k, v in sorted(q.values.items())],
        }
        for q in quotas
        if cq.matches(q, components, req["strict"])
    ]
    return answer


async def handle_alter_client_quotas(
    ctx: RequestContext, req: bodies.AlterClientQuotasRequest
) -> bodies.AlterClientQuotasResponse:
    allowed = ctx.may_cluster(Operation.ALTER_CONFIGS)
    results: list[bodies.AlterClientQuotasResponseEntries] = []
    changed = False
    for e in req["entries"]:
        entry: bodies.AlterClientQuotasResponseEntries = {
            "error_code": E.NONE,
            "error_message": None,
            "entity": [
                {"entity_type": x["entity_type"], "entity_name": x["entity_name"]}
                for x in e["entity"]
            ],
        }
        results.append(entry)
        if not allowed:
            entry["error_code"] = E.CLUSTER_AUTHORIZATION_FAILED
            continue
        try:
            entity = cq.make_entity((x["entity_type"], x["entity_name"]) for x in e["entity"])
            changes: dict[str, float | None] = {}
            for op in e["ops"]:
                if op["key"] in changes:
                    raise cq.InvalidQuota(f"quota key {op['key']!r} is given twice")
                changes[op["key"]] = None if op["remove"] else op["value"]
            await blocking(
                ctx.services.admin.alter_client_quotas,
                ctx.principal,
                entity,
                changes,
                req["validate_only"],
            )
        except cq.InvalidQuota as exc:
            entry["error_code"], entry["error_message"] = E.INVALID_REQUEST, str(exc)
        except AdminError as exc:
            entry["error_code"], entry["error_message"] = exc.error_code, exc.message
        else:
            changed = changed or not req["validate_only"]
    if changed:  # the next request (and Describe) sees the new quotas
        await ctx.services.metadata.refresh_metadata()
    return {"throttle_time_ms": 0, "entries": results}


# The APIs this module serves, by their message definitions' keys.
HANDLERS: dict[int, Handler] = {
    describe_client_quotas_api.KEY: handle_describe_client_quotas,
    alter_client_quotas_api.KEY: handle_alter_client_quotas,
}
