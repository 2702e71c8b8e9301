"""What every handler gets: the request's context and the services it may use.

Handlers see narrow protocols, never the broker process itself: the broker (``server``)
builds one :class:`Services` at start-up and hands each request a :class:`RequestContext`
holding it, the principal and where the request came from.

Authorization splits every request's resources into authorized / unauthorized / unknown
before doing any work, as Kafka's handlers do. Names are always resolved inside the
principal's tenant, so another tenant's topic is indistinguishable from a missing one.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, TypeVar

from data_plane import client_quotas, internal_auth
from data_plane.acl import (
    CLUSTER_RESOURCE_NAME,
    VALID_OPERATIONS,
    Operation,
    ResourceType,
    authorize,
)
from data_plane.broker.metrics import BrokerMetrics
from data_plane.broker.ports import Admin
from data_plane.broker.quotas import ByteRateQuotas
from data_plane.broker.usage import Meter
from data_plane.groups.consumer_group import ConsumerGroupCoordinator, Resolved, Resolver
from data_plane.groups.coordinator import GroupCoordinator
from data_plane.metadata.model import BrokerInfo, MetadataSnapshot, Principal, TopicInfo
from data_plane.protocol.errors import ErrorCode
from data_plane.protocol.messages.metadata import AUTHORIZED_OPERATIONS_OMITTED
from data_plane.replication.manager import ReplicaManager
from data_plane.replication.partition import Partition
from data_plane.txn.coordinator import TransactionCoordinator
from data_plane.txn.model import TxnPartition

logger = logging.getLogger("millrace.broker")
E = ErrorCode
T = ResourceType.TOPIC
R = TypeVar("R")


class CloseConnection(Exception):
    """A handler's answer is to close the connection (logged by the connection with the
    reason)."""


class Metadata(Protocol):
    """The broker's current view of the cluster, and a way to refresh it now (after a
    change a handler made, so its next answer shows it)."""

    @property
    def snapshot(self) -> MetadataSnapshot: ...

    async def refresh_metadata(self) -> None: ...


class Cluster(Protocol):
    """This broker's place in the cluster: its id and the addresses clients should use."""

    @property
    def broker_id(self) -> int: ...

    def broker_metadata(self, tls: bool = False) -> dict[str, Any]: ...

    def cluster_metadata(self, tls: bool = False) -> list[dict[str, Any]]: ...

    def coordinator_for(self, tenant_id: int, group_id: str) -> BrokerInfo | None: ...

    def transaction_coordinator_for(
        self, tenant_id: int, transactional_id: str
    ) -> BrokerInfo | None: ...


class TenantLimits(Protocol):
    """Per-tenant settings and the storage this broker holds for each tenant."""

    def default_partitions(self, tenant_id: int) -> int: ...

    def tenant_rate(self, tenant_id: int, direction: str) -> int: ...

    def tenant_storage(self, tenant_id: int) -> int: ...

    def tenant_over_storage(self, tenant_id: int) -> bool: ...

    def tenant_suspended(self, tenant_id: int) -> str | None:
        """Why the tenant's clients may not write (an operator suspended it), or None."""
        ...

    def add_storage(self, tenant_id: int, nbytes: int) -> None: ...


class ProducerIds(Protocol):
    async def next_producer_id(self) -> int: ...


class TxnRouter(Protocol):
    """Transactions V2's implicit adds, to the id's coordinator wherever it is
    (``data_plane.broker.txn_router``)."""

    async def add(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        *,
        partitions: Iterable[TxnPartition] = (),
        group: str | None = None,
    ) -> int: ...


@dataclass(frozen=True)
class Services:
    metadata: Metadata
    cluster: Cluster
    tenants: TenantLimits
    producer_ids: ProducerIds
    admin: Admin  # admin changes and audit, through the control plane's services
    replicas: ReplicaManager
    groups: GroupCoordinator
    consumer_groups: ConsumerGroupCoordinator  # KIP-848 groups
    quotas: ByteRateQuotas
    metrics: BrokerMetrics
    transactions: TransactionCoordinator
    usage: Meter = field(default_factory=Meter)  # usage metering (docs/usage.md)
    # Whether members may join with the consumer protocol (ConsumerGroupHeartbeat).
    consumer_protocol: bool = False
    txn_router: TxnRouter | None = None  # None: transactions V2's implicit adds refused


async def blocking(fn: Callable[..., R], *args: Any) -> R:
    """Run a blocking call (the metadata store) on a worker thread."""
    return await asyncio.to_thread(fn, *args)


@dataclass
class RequestContext:
    services: Services
    principal: Principal
    host: str
    version: int
    client_id: str = ""
    tls: bool = False  # arrived on the TLS listener: answer with its addresses

    @property
    def snapshot(self) -> MetadataSnapshot:
        return self.services.metadata.snapshot

    def may(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        if self.principal.internal:  # never widened by a tenant's ACLs
            grants = self.principal.grants
            if (op, rtype) not in (internal_auth.ALLOWED if grants is None else grants):
                return False
            named = self.principal.resources
            return named is None or rtype is ResourceType.CLUSTER or (rtype, name) in named
        return (
            authorize(
                self.snapshot.tenant_acls(self.principal.tenant_id),
                principal=self.principal.name,
                host=self.host,
                operation=op,
                resource_type=rtype,
                resource_name=name,
            ).allowed
            or self.principal.is_anonymous
        )

    def may_cluster(self, op: Operation) -> bool:
        return self.may(op, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)

    def topic(self, name: str | None) -> TopicInfo | None:
        if name is None:
            return None
        if self.principal.broker:
            try:
                return self.snapshot.topic_by_id(uuid.UUID(name))
            except ValueError:
                return None
        return self.snapshot.topic(self.principal.tenant_id, name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """A topic by its id, inside the principal's tenant (another broker sees every
        tenant's): another tenant's id is as unknown as one that never existed."""
        topic = self.snapshot.topic_by_id(topic_id)
        if topic is None or (
            topic.tenant_id != self.principal.tenant_id and not self.principal.broker
        ):
            return None
        return topic


def leader_partition(
    ctx: RequestContext, topic: TopicInfo | None, allowed: bool, index: int
) -> tuple[Partition | None, int]:
    """This broker's leadership of one requested partition, or the error to answer with.

    Kafka's order: an unknown topic first (so nothing is revealed to the unauthorized),
    then authorization, then whether this broker leads the partition.
    """
    if topic is None:
        return None, E.UNKNOWN_TOPIC_OR_PARTITION
    if not allowed:
        return None, E.TOPIC_AUTHORIZATION_FAILED
    return ctx.services.replicas.leader_partition(topic, index)


# Errors that tell a client (Fetch v16+, Produce v10+) where the partition's leader is now.
LEADER_CHANGED = (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH)


class CurrentLeader(TypedDict, total=False):
    """KIP-951's ``current_leader`` (Fetch and Produce responses alike)."""

    leader_id: int
    leader_epoch: int


class NodeEndpoint(TypedDict, total=False):
    """KIP-951's ``node_endpoints`` element (Fetch and Produce responses alike)."""

    node_id: int
    host: str
    port: int
    rack: str | None


def current_leader(
    topic: TopicInfo, index: int, error: int, leaders: set[int]
) -> CurrentLeader | None:
    """KIP-951: a partition refused because its leader moved names the leader it has now
    (from this broker's metadata), and the leader's id joins ``leaders`` (for
    :func:`leader_endpoints`). None for any other answer."""
    if error not in LEADER_CHANGED or not 0 <= index < topic.partition_count:
        return None
    info = topic.partitions[index]
    leader = -1 if info.leader is None else info.leader
    if leader >= 0:
        leaders.add(leader)
    return {"leader_id": leader, "leader_epoch": info.leader_epoch}


def leader_endpoints(ctx: RequestContext, leaders: set[int]) -> list[NodeEndpoint]:
    """KIP-951's ``node_endpoints``: only the leaders named, at the addresses of the
    listener the client used."""
    return [
        {"node_id": m["node_id"], "host": m["host"], "port": m["port"], "rack": m["rack"]}
        for m in ctx.services.cluster.cluster_metadata(ctx.tls)
        if m["node_id"] in leaders
    ]


def authorized_operations(ctx: RequestContext, rtype: ResourceType, name: str, wanted: bool) -> int:
    """KIP-430's bit field of what the caller may do with a resource (bit n: AclOperation
    n), or Kafka's "not asked" value when the request did not ask for it."""
    if not wanted:
        return AUTHORIZED_OPERATIONS_OMITTED
    bits = 0
    # The operations an ACL may name for this resource type (ALL is not reported).
    for op in VALID_OPERATIONS[rtype] - {Operation.ALL}:
        if ctx.may(op, rtype, name):
            bits |= 1 << op.kafka_code
    return bits


def record_bytes(ctx: RequestContext, direction: str, nbytes: int) -> int:
    """Account a produce ("produce") or fetch ("fetch") of ``nbytes`` to the tenant's byte
    rate and to the client quota that applies to this principal and client id (Kafka's
    precedence, ``client_quotas.resolve``); the throttle time (ms) is the longer of the two,
    so a client quota never lets a principal past its tenant's limit."""
    svc = ctx.services
    tenant_id = ctx.principal.tenant_id
    throttle = svc.quotas.record(
        tenant_id, direction, nbytes, svc.tenants.tenant_rate(tenant_id, direction)
    )
    tenant = ctx.snapshot.tenants.get(tenant_id)
    if tenant is not None and tenant.client_quotas:
        user = ctx.principal.name.removeprefix("User:")
        key = client_quotas.KEY_OF_DIRECTION[direction]
        found = client_quotas.resolve(tenant.client_quotas, user, ctx.client_id, key)
        if found is not None:
            rate, entity = found
            throttle = max(
                throttle, svc.quotas.record_bucket((tenant_id, direction, entity), nbytes, rate)
            )
    if throttle:
        svc.metrics.throttled(ctx.principal.tenant_slug, direction, throttle)
    return throttle


async def audit(
    ctx: RequestContext, action: str, object_type: str, object_repr: str, after: dict[str, Any]
) -> None:
    """Record a data-plane change in the audit log. The change is made already: a failure
    to record it is logged, and the request is still answered."""
    try:
        await blocking(
            ctx.services.admin.audit, ctx.principal, action, object_type, object_repr, after
        )
    except Exception:
        logger.exception("could not audit %s of %s %s", action, object_type, object_repr)


# A handler takes its API's request body (``bodies.<Api>Request``) and returns its response
# body (``bodies.<Api>Response``; None for a produce with acks=0). The table holds handlers
# of every API, so the body types meet here as Any: the connection passes ``request.body``.
Handler = Callable[[RequestContext, Any], Awaitable[Any]]


def owner_error(ctx: RequestContext, owner: BrokerInfo | None) -> ErrorCode | None:
    """The answer when this broker is not ``owner`` (a group's or a transactional id's
    coordinator): NOT_COORDINATOR, and clients look again; None when it is."""
    if owner is None:
        return E.COORDINATOR_NOT_AVAILABLE
    if owner.id != ctx.services.cluster.broker_id:
        return E.NOT_COORDINATOR
    return None


def coordinator_error(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    """NOT_COORDINATOR when another broker owns the group (clients then re-discover)."""
    return owner_error(ctx, ctx.services.cluster.coordinator_for(ctx.principal.tenant_id, group_id))


def group_check(
    ctx: RequestContext, group_id: str, op: Operation = Operation.READ
) -> ErrorCode | None:
    """The group checks of every group API: the ACL (Read unless told), then whether this
    broker coordinates the group."""
    if not ctx.may(op, ResourceType.GROUP, group_id):
        return E.GROUP_AUTHORIZATION_FAILED
    return coordinator_error(ctx, group_id)


class TopicAuthorization(Exception):
    """A subscription names topics the principal may not describe."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(", ".join(names))
        self.names = names


def topic_resolver(ctx: RequestContext) -> Resolver:
    """What a member's subscription names in its tenant now, as this principal sees it."""
    topics = ctx.snapshot.tenant_topics(ctx.principal.tenant_id)

    def resolve(names: tuple[str, ...], regex: re.Pattern[str] | None) -> Resolved:
        out: Resolved = {}
        refused = []
        for name in names:
            topic = topics.get(name)
            if topic is None:
                continue  # not created yet: picked up when it is
            if not ctx.may(Operation.DESCRIBE, T, name):
                refused.append(name)
                continue
            out[name] = (str(topic.topic_id), topic.partition_count)
        if refused:
            raise TopicAuthorization(sorted(refused))
        if regex is not None:
            for name, topic in topics.items():
                if name not in out and regex.fullmatch(name):
                    if ctx.may(Operation.DESCRIBE, T, name):
                        out[name] = (str(topic.topic_id), topic.partition_count)
        return out

    return resolve
