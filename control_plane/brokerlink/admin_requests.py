"""Kafka admin requests (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
CreateAcls, DeleteAcls, DeleteGroups, AlterClientQuotas, ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments) through the same service functions as the REST API and the
controller: validation, tenant limits, audit events and the change log, with the API key
(or the operator) as the actor. ``validate_only`` runs the service and rolls back, so a
refused or validate-only request leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from control_plane.access import services as access_services
from control_plane.access.models import Acl, ApiKey
from control_plane.audit.services import record_event
from control_plane.brokerlink.connections import fresh_connection
from control_plane.brokerlink.credentials import operator_of
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker, Partition, Topic
from control_plane.controller import reassign
from control_plane.controller.services import elect_requested
from control_plane.core.actor import Actor
from control_plane.core.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    LimitExceeded,
    NotFound,
    ServiceError,
)
from control_plane.groups import services as group_services
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Tenant
from data_plane.broker.ports import AdminError
from data_plane.client_quotas import Entity
from data_plane.metadata.model import BrokerInfo, Principal
from data_plane.protocol.errors import ErrorCode


class _Rollback(Exception):
    pass


def _admin_error(exc: ServiceError) -> AdminError:
    field = exc.field or ""
    if isinstance(exc, AlreadyExists):
        return AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, exc.message)
    if isinstance(exc, LimitExceeded):
        return AdminError(ErrorCode.POLICY_VIOLATION, exc.message)
    if isinstance(exc, InvalidInput):
        if field == "name":
            return AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION, exc.message)
        if field == "partition_count":
            return AdminError(ErrorCode.INVALID_PARTITIONS, exc.message)
        if field == "replication_factor":
            return AdminError(ErrorCode.INVALID_REPLICATION_FACTOR, exc.message)
        if field == "replica_assignment":
            return AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, exc.message)
        if field.startswith("configs"):
            return AdminError(ErrorCode.INVALID_CONFIG, exc.message)
        return AdminError(ErrorCode.INVALID_REQUEST, exc.message)
    return AdminError(ErrorCode.UNKNOWN_SERVER_ERROR, exc.message)


class DjangoAdmin:
    """:class:`data_plane.broker.ports.Admin` through the control plane's services."""

    def _actor(self, principal: Principal) -> Actor:
        if principal.operator and principal.key_id:
            found = operator_of(principal.key_id, fresh=False)
            return Actor(user=found[1] if found else None)
        key = ApiKey.objects.filter(key_id=principal.key_id).first() if principal.key_id else None
        return Actor(api_key=key)

    def _run(self, fn: Callable[[], Any], validate_only: bool) -> Any:
        fresh_connection()
        try:
            with transaction.atomic():
                result = fn()
                if validate_only:
                    raise _Rollback
                return result
        except _Rollback:
            return None
        except ServiceError as exc:
            raise _admin_error(exc) from None

    def _topic(self, principal: Principal, name: str) -> Topic:
        topic = Topic.objects.filter(tenant_id=principal.tenant_id, name=name).first()
        if topic is None:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return topic

    def create_topic(
        self,
        principal: Principal,
        name: str,
        partitions: int,
        replication_factor: int | None,
        configs: Mapping[str, str],
        validate_only: bool,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        tenant = Tenant.objects.get(pk=principal.tenant_id)
        self._run(
            lambda: catalog_services.create_topic(
                self._actor(principal),
                tenant,
                name=name,
                partition_count=partitions,
                replication_factor=replication_factor,
                configs=dict(configs),
                replica_assignment=assignment,
            ),
            validate_only,
        )

    def delete_topic(self, principal: Principal, name: str) -> None:
        self._run(
            lambda: catalog_services.delete_topic(
                self._actor(principal), self._topic(principal, name)
            ),
            False,
        )

    def create_partitions(
        self,
        principal: Principal,
        name: str,
        count: int,
        validate_only: bool,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        self._run(
            lambda: catalog_services.add_partitions(
                self._actor(principal),
                self._topic(principal, name),
                partition_count=count,
                replica_assignment=assignment,
            ),
            validate_only,
        )

    def alter_topic_configs(
        self,
        principal: Principal,
        name: str,
        changes: Mapping[str, str | None],
        validate_only: bool,
    ) -> None:
        self._run(
            lambda: catalog_services.alter_topic_configs(
                self._actor(principal), self._topic(principal, name), dict(changes)
            ),
            validate_only,
        )

    def elect_leaders(
        self, principal: Principal, unclean: bool, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[str, dict[int, tuple[int, str | None]]]:
        fresh_connection()
        actor = self._actor(principal)
        rows = Partition.objects.filter(topic__tenant_id=principal.tenant_id).select_related(
            "topic__tenant"
        )
        if partitions is not None:
            rows = rows.filter(topic__name__in=list(partitions))
        found = {(row.topic.name, row.index): row for row in rows}
        wanted: Mapping[str, Sequence[int]]
        if partitions is None:
            every: dict[str, list[int]] = {}
            for name, index in sorted(found):
                every.setdefault(name, []).append(index)
            wanted = every
        else:
            wanted = partitions
        out: dict[str, dict[int, tuple[int, str | None]]] = {}
        for name, indexes in wanted.items():
            results = out.setdefault(name, {})
            for index in indexes:
                row = found.get((name, index))
                if row is None:
                    results[index] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                    continue
                results[index] = (elect_requested(row, unclean=unclean, actor=actor), None)
        return out

    def alter_reassignments(
        self,
        principal: Principal,
        requests: Mapping[str, Mapping[int, Sequence[int] | None]],
    ) -> dict[str, dict[int, tuple[int, str | None]]]:
        fresh_connection()
        actor = self._actor(principal)
        rows = Partition.objects.filter(
            topic__tenant_id=principal.tenant_id, topic__name__in=list(requests)
        ).select_related("topic__tenant")
        found = {(row.topic.name, row.index): row for row in rows}
        out: dict[str, dict[int, tuple[int, str | None]]] = {}
        for name, wanted in requests.items():
            results = out.setdefault(name, {})
            for index, target in wanted.items():
                row = found.get((name, index))
                if row is None:
                    results[index] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                    continue
                results[index] = self._reassign(row, target, actor)
        return out

    @staticmethod
    def _reassign(
        row: Partition, target: Sequence[int] | None, actor: Actor
    ) -> tuple[int, str | None]:
        try:
            if target is None:
                if not reassign.is_reassigning(row):
                    return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"{row} is not being reassigned"
                reassign.cancel(row, actor)
            else:
                reassign.reassign(row, list(target), actor)
        except InvalidInput as exc:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, exc.message
        except Conflict as exc:
            return ErrorCode.REASSIGNMENT_IN_PROGRESS, exc.message
        return ErrorCode.NONE, None

    def list_reassignments(
        self, principal: Principal, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]:
        fresh_connection()
        rows = (
            Partition.objects.filter(topic__tenant_id=principal.tenant_id)
            .exclude(adding_replicas=[], removing_replicas=[])
            .select_related("topic")
            .order_by("topic__name", "index")
        )
        if partitions is not None:
            rows = rows.filter(topic__name__in=list(partitions))
        out: dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]] = {}
        for row in rows:
            if partitions is not None and row.index not in partitions[row.topic.name]:
                continue
            out.setdefault(row.topic.name, {})[row.index] = (
                tuple(row.replicas),
                tuple(row.adding_replicas),
                tuple(row.removing_replicas),
            )
        return out

    def fenced_brokers(self) -> Mapping[int, BrokerInfo]:
        fresh_connection()
        live = Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS)
        return {
            b.id: BrokerInfo(b.id, b.host, b.port, b.rack or None, b.tls_host or None, b.tls_port)
            for b in Broker.objects.exclude(id__in=live.values("id")).order_by("id")
        }

    def audit(
        self,
        principal: Principal,
        action: str,
        object_type: str,
        object_repr: str,
        after: dict[str, Any],
    ) -> None:
        fresh_connection()
        record_event(
            self._actor(principal),
            tenant=Tenant.objects.get(pk=principal.tenant_id),
            action=action,
            object_type=object_type,
            object_id=object_repr,
            object_repr=object_repr,
            after={"principal": principal.name, **after},
        )

    def delete_group(self, principal: Principal, group_id: str) -> bool:
        """True if deleted; False if no such group; AdminError if it has members."""
        fresh_connection()
        tenant = Tenant.objects.get(pk=principal.tenant_id)
        try:
            group_services.delete_group(self._actor(principal), tenant, group_id)
        except NotFound:
            return False
        except Conflict as exc:
            raise AdminError(ErrorCode.NON_EMPTY_GROUP, exc.message) from None
        return True

    def create_acl(self, principal: Principal, binding: Any) -> None:
        tenant = Tenant.objects.get(pk=principal.tenant_id)
        self._run(
            lambda: access_services.create_acl(
                self._actor(principal),
                tenant,
                principal=binding.principal,
                resource_type=binding.resource_type.value,
                pattern_type=binding.pattern_type.value,
                resource_name=binding.resource_name,
                operation=binding.operation.value,
                permission=binding.permission.value,
                host=binding.host,
            ),
            False,
        )

    def alter_client_quotas(
        self,
        principal: Principal,
        entity: Entity,
        changes: Mapping[str, float | None],
        validate_only: bool,
    ) -> None:
        fresh_connection()
        tenant = Tenant.objects.get(pk=principal.tenant_id)
        self._run(
            lambda: tenancy_services.alter_client_quotas(
                self._actor(principal), tenant, entity=entity, changes=dict(changes)
            ),
            validate_only,
        )

    def delete_acls(self, principal: Principal, matcher: Callable[[Any], bool]) -> list[Any]:
        fresh_connection()
        deleted = []
        with transaction.atomic():
            for acl in Acl.objects.filter(tenant_id=principal.tenant_id).select_related(
                "service_account"
            ):
                binding = acl.to_binding()
                if matcher(binding):
                    access_services.delete_acl(self._actor(principal), acl)
                    deleted.append(binding)
        return deleted
