"""The broker's metadata store, backed by the Django models and services.

Implements :class:`data_plane.broker.ports.MetadataStore`. Snapshots are read in one
transaction; admin requests from Kafka clients go through the same service functions as
the REST API (validation, tenant limits, audit events, notifications), with the API key as
the actor. ``validate_only`` requests run the service and roll back.

Called from the broker's worker threads, never from its event loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from control_plane.access import services as access_services
from control_plane.access.models import Acl, ApiKey
from control_plane.audit.services import record_event
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker, BrokerState, Partition, ProducerIdBlock, Topic
from control_plane.controller import services as controller_services
from control_plane.core.actor import Actor
from control_plane.core.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    LimitExceeded,
    NotFound,
    ServiceError,
)
from control_plane.core.liveness import LivenessLock
from control_plane.core.notify import CHANNEL
from control_plane.groups import services as group_services
from control_plane.tenancy.models import Membership, Role, Tenant
from data_plane import internal_auth
from data_plane.broker.ports import AdminError, ScramCredentials
from data_plane.groups.model import GroupRecord, OffsetRecord
from data_plane.metadata.model import (
    BrokerInfo,
    MetadataSnapshot,
    PartitionInfo,
    Principal,
    TenantInfo,
    TopicInfo,
)
from data_plane.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)

DEFAULT_TENANT = "default"


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


class DjangoMetadataStore:
    def __init__(self, *, allow_anonymous: bool = False) -> None:
        self.allow_anonymous = allow_anonymous
        self._version = 0
        self._listener: Any = None
        self._listen_lock = threading.Lock()
        self._liveness = LivenessLock()

    # --- snapshots --------------------------------------------------------------------

    def snapshot(self) -> MetadataSnapshot:
        close_old_connections()
        with transaction.atomic():
            tenants = {
                t.pk: TenantInfo(
                    t.pk,
                    t.slug,
                    t.produce_byte_rate,
                    t.fetch_byte_rate,
                    t.max_partitions,
                    t.max_storage_bytes,
                    t.default_partitions,
                )
                for t in Tenant.objects.all()
            }
            partitions: dict[int, list[PartitionInfo]] = {}
            for p in Partition.objects.order_by("topic_id", "index"):
                partitions.setdefault(p.topic_id, []).append(
                    PartitionInfo(
                        p.index,
                        p.leader,
                        p.leader_epoch,
                        tuple(p.replicas),
                        tuple(p.isr),
                        p.partition_epoch,
                    )
                )
            topics: dict[int, dict[str, TopicInfo]] = {}
            for t in Topic.objects.all():
                topics.setdefault(t.tenant_id, {})[t.name] = TopicInfo(
                    t.tenant_id,
                    t.name,
                    t.topic_id,
                    tuple(partitions.get(t.pk, ())),
                    dict(t.configs),
                )
            acls: dict[int, list[Any]] = {}
            for acl in Acl.objects.select_related("service_account"):
                acls.setdefault(acl.tenant_id, []).append(acl.to_binding())
            lease = settings.MILLRACE_BROKER_LEASE_SECONDS
            brokers = {
                b.id: BrokerInfo(
                    b.id, b.host, b.port, b.rack or None, b.tls_host or None, b.tls_port
                )
                for b in Broker.objects.live(lease)
            }
            active = frozenset(ApiKey.objects.active().values_list("key_id", flat=True))
        self._version += 1
        return MetadataSnapshot(
            tenants=tenants,
            topics=topics,
            acls={k: tuple(v) for k, v in acls.items()},
            brokers=brokers,
            active_keys=active,
            cluster_id=settings.MILLRACE_CLUSTER_ID,
            version=self._version,
        )

    def wait_for_change(self, timeout: float) -> bool:
        """LISTEN on Postgres; elsewhere just wait (the caller polls)."""
        if connection.vendor != "postgresql":
            time.sleep(timeout)
            return False
        with self._listen_lock:
            if self._listener is None:
                import psycopg

                params = connection.get_connection_params()
                params.pop("cursor_factory", None)
                params.pop("context", None)
                self._listener = psycopg.connect(**params, autocommit=True)
                self._listener.execute(f"LISTEN {CHANNEL}")
            try:
                got = any(True for _ in self._listener.notifies(timeout=timeout, stop_after=1))
            except Exception:
                logger.warning("metadata LISTEN connection failed; polling", exc_info=True)
                with contextlib.suppress(Exception):
                    self._listener.close()
                self._listener = None
                time.sleep(timeout)
                return False
            if got:  # drain a burst of notifications into one refresh
                for _ in self._listener.notifies(timeout=0.05):
                    pass
            return got

    # --- authentication ------------------------------------------------------------------

    def _active_key(self, key_id: str) -> ApiKey | None:
        close_old_connections()
        return (
            ApiKey.objects.active()
            .select_related("service_account", "tenant")
            .filter(key_id=key_id)
            .first()
        )

    @staticmethod
    def _principal(key: ApiKey) -> Principal:
        return Principal(key.tenant_id, key.tenant.slug, key.service_account.principal, key.key_id)

    def _proxied_key(self, tenant_slug: str, key_id: str) -> ApiKey | None:
        key = self._active_key(key_id)
        if key is None or key.tenant.slug != tenant_slug:
            return None
        return key

    @staticmethod
    def _console_membership(user: str) -> Membership | None:
        """The membership a console user name acts for, while it exists (and the user is
        active)."""
        member = internal_auth.console_member(user)
        if member is None:
            return None
        close_old_connections()
        slug, user_id = member
        return (
            Membership.objects.select_related("tenant")
            .filter(tenant__slug=slug, user_id=user_id, user__is_active=True)
            .first()
        )

    @staticmethod
    def _operator(user: str, *, fresh: bool = True) -> tuple[Tenant, Any] | None:
        """(tenant, staff user) an operator user name acts as, while the user is active
        staff and the tenant exists. ``fresh=False`` inside a transaction (where the
        connection must be kept)."""
        member = internal_auth.operator_member(user)
        if member is None:
            return None
        if fresh:
            close_old_connections()
        slug, user_id = member
        staff = get_user_model().objects.filter(pk=user_id, is_active=True, is_staff=True).first()
        tenant = Tenant.objects.filter(slug=slug).first()
        if staff is None or tenant is None:
            return None
        return tenant, staff

    @staticmethod
    def _internal_tenant(user: str) -> Tenant | None:
        slug = internal_auth.tenant_slug(user)
        if slug is None:
            return None
        close_old_connections()
        return Tenant.objects.filter(slug=slug).first()

    def scram_credentials(self, key_id: str, mechanism: str) -> ScramCredentials | None:
        if key_id == internal_auth.BROKER_USER:
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        proxied = internal_auth.proxied_key(key_id)
        if proxied is not None:
            if self._proxied_key(*proxied) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        if internal_auth.operator_member(key_id) is not None:
            if self._operator(key_id) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        if internal_auth.console_member(key_id) is not None:
            if self._console_membership(key_id) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        if internal_auth.tenant_slug(key_id) is not None:
            if self._internal_tenant(key_id) is None:
                return None
            return ScramCredentials(
                *internal_auth.scram_credentials(
                    settings.MILLRACE_INTERNAL_SECRET, key_id, mechanism
                )
            )
        key = self._active_key(key_id)
        if key is None:
            return None
        prefix = "scram_sha256" if mechanism == "SCRAM-SHA-256" else "scram_sha512"
        return ScramCredentials(
            bytes(getattr(key, f"{prefix}_salt")),
            bytes(getattr(key, f"{prefix}_stored_key")),
            bytes(getattr(key, f"{prefix}_server_key")),
            getattr(key, f"{prefix}_iterations"),
        )

    def principal_for_key(self, key_id: str) -> Principal | None:
        if key_id == internal_auth.BROKER_USER:
            return Principal(
                0, "", internal_auth.BROKER_PRINCIPAL_NAME, key_id, internal=True, broker=True
            )
        proxied = internal_auth.proxied_key(key_id)
        if proxied is not None:
            key = self._proxied_key(*proxied)
            # The key itself, ACLs and revocation included; the web tier proved its secret.
            return None if key is None else self._principal(key)
        if internal_auth.operator_member(key_id) is not None:
            found = self._operator(key_id)
            if found is None:
                return None
            tenant, _ = found
            return Principal(
                tenant.pk,
                tenant.slug,
                internal_auth.OPERATOR_PRINCIPAL_NAME,
                key_id,
                internal=True,
                operator=True,
                grants=internal_auth.OPERATOR,
            )
        if internal_auth.console_member(key_id) is not None:
            membership = self._console_membership(key_id)
            if membership is None:
                return None
            writer = Role.at_least(membership.role, Role.DEVELOPER)
            return Principal(
                membership.tenant_id,
                membership.tenant.slug,
                internal_auth.CONSOLE_PRINCIPAL_NAME,
                key_id,
                internal=True,
                grants=internal_auth.CONSOLE_WRITER if writer else internal_auth.ALLOWED,
            )
        if internal_auth.tenant_slug(key_id) is not None:
            tenant = self._internal_tenant(key_id)
            if tenant is None:
                return None
            return Principal(
                tenant.pk, tenant.slug, internal_auth.PRINCIPAL_NAME, key_id, internal=True
            )
        key = self._active_key(key_id)
        if key is None:
            return None
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
        return self._principal(key)

    def verify_plain(self, key_id: str, secret: str) -> Principal | None:
        close_old_connections()
        try:
            key = access_services.authenticate_api_key(key_id, secret)
        except access_services.KeyRejected:
            return None
        return self._principal(key)

    def anonymous_principal(self) -> Principal | None:
        if not self.allow_anonymous:
            return None
        close_old_connections()
        tenant = Tenant.objects.filter(slug=DEFAULT_TENANT).first()
        if tenant is None:
            return None
        return Principal(tenant.pk, tenant.slug, "User:ANONYMOUS", None)

    # --- brokers --------------------------------------------------------------------------

    def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None,
        tls_host: str | None = None,
        tls_port: int | None = None,
    ) -> None:
        close_old_connections()
        held = self._liveness.ensure(broker_id)  # before the row says so (liveness.py)
        Broker.objects.update_or_create(
            id=broker_id,
            defaults={
                "host": host,
                "port": port,
                "rack": rack or "",
                "tls_host": tls_host or "",
                "tls_port": tls_port,
                "dev_listener": self.allow_anonymous,
                "state": BrokerState.RUNNING,
                "last_heartbeat": timezone.now(),
                "liveness_lock": held,
            },
        )

    def heartbeat(self, broker_id: int) -> None:
        close_old_connections()
        held = self._liveness.ensure(broker_id)
        Broker.objects.filter(id=broker_id).update(
            last_heartbeat=timezone.now(), state=BrokerState.RUNNING, liveness_lock=held
        )

    def controlled_shutdown(self, broker_id: int) -> int:
        close_old_connections()
        return controller_services.controlled_shutdown(broker_id)

    def deregister_broker(self, broker_id: int) -> None:
        close_old_connections()
        Broker.objects.filter(id=broker_id).update(state=BrokerState.SHUTTING_DOWN)
        self._liveness.release()

    def allocate_producer_ids(self, count: int) -> int:
        close_old_connections()
        with transaction.atomic():
            block, _ = ProducerIdBlock.objects.select_for_update().get_or_create(pk=1)
            first = block.next_id
            block.next_id = first + count
            block.save(update_fields=["next_id"])
        return first

    def alter_partition(
        self,
        topic_id: str,
        index: int,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
    ) -> tuple[int, int, int, tuple[int, ...]]:
        close_old_connections()
        result = controller_services.alter_partition(
            topic_id,
            index,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            new_isr=isr,
        )
        return result.error, result.leader_epoch, result.partition_epoch, result.isr

    def assign_unassigned_partitions(self) -> int:
        """Place partitions created before enough brokers were up, over the live brokers."""
        close_old_connections()
        with transaction.atomic():
            return catalog_services.assign_unassigned_partitions()

    # --- admin -------------------------------------------------------------------------------

    def _actor(self, principal: Principal) -> Actor:
        if principal.operator and principal.key_id:
            found = self._operator(principal.key_id, fresh=False)
            return Actor(user=found[1] if found else None)
        key = ApiKey.objects.filter(key_id=principal.key_id).first() if principal.key_id else None
        return Actor(api_key=key)

    def _run(self, fn: Callable[[], Any], validate_only: bool) -> Any:
        close_old_connections()
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

    # --- consumer groups ------------------------------------------------------------------

    def load_group(self, tenant_id: int, group_id: str) -> GroupRecord | None:
        close_old_connections()
        return group_services.load_group(tenant_id, group_id)

    def save_group(self, record: GroupRecord) -> None:
        close_old_connections()
        group_services.store_group(record)

    def commit_offsets(self, tenant_id: int, group_id: str, offsets: list[OffsetRecord]) -> None:
        close_old_connections()
        group_services.store_offsets(tenant_id, group_id, offsets)

    def fetch_offsets(self, tenant_id: int, group_id: str) -> list[OffsetRecord]:
        close_old_connections()
        return group_services.load_offsets(tenant_id, group_id)

    def delete_offsets(
        self, tenant_id: int, group_id: str, partitions: list[tuple[str, int]]
    ) -> None:
        close_old_connections()
        group_services.remove_offsets(tenant_id, group_id, partitions)

    def list_groups(self, tenant_id: int) -> list[GroupRecord]:
        close_old_connections()
        return group_services.list_group_records(tenant_id)

    def audit(
        self,
        principal: Principal,
        action: str,
        object_type: str,
        object_repr: str,
        after: dict[str, Any],
    ) -> None:
        close_old_connections()
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
        close_old_connections()
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

    def delete_acls(self, principal: Principal, matcher: Callable[[Any], bool]) -> list[Any]:
        close_old_connections()
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
