"""The narrow interfaces the broker needs from the control plane, one per concern.

* :class:`MetadataSource`: what brokers see (tenants, topics, partitions, ACLs, keys,
  live brokers), as a snapshot or as the changes after a version.
* :class:`Credentials`: who a SASL user is (SCRAM credentials, principals, PLAIN).
* :class:`BrokerRegistry`: the broker's own life (register, lease, shutdown) and the
  controller questions it asks (AlterPartition, producer ids, placing new partitions).
* :class:`Admin`: Kafka admin requests, run through the control plane's services.
* :class:`GroupStore` (the group coordinator's, ``data_plane.groups.coordinator``):
  consumer groups and committed offsets.
* :class:`ClientReports`: which client software and request versions tenants use.
* :class:`TransactionStore`: the transaction coordinators' state (Step 13).
* :class:`UsageReports`: the tenants' metered usage (``data_plane.broker.usage``).

:class:`MetadataStore` is all of them: what ``manage.py broker`` hands the broker.
Implementations: the Django/Postgres adapters in ``control_plane.brokerlink`` and
:class:`data_plane.broker.memory_store.MemoryStore`; one contract suite
(``tests/brokerlink/test_store_contract.py``) runs against both.

Methods are synchronous (the broker calls them from worker threads, never on its event
loop) and return plain values from :mod:`data_plane.metadata.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from data_plane.broker.client_versions import ClientUse
from data_plane.broker.usage import UsageReport
from data_plane.client_quotas import Entity
from data_plane.groups.coordinator import GroupStore
from data_plane.groups.model import OffsetRecord
from data_plane.metadata.model import BrokerInfo, MetadataDelta, MetadataSnapshot, Principal
from data_plane.txn.model import TxnMetadata

__all__ = [
    "Admin",
    "AdminError",
    "BrokerRegistry",
    "ClientReports",
    "Credentials",
    "GroupStore",
    "MetadataSource",
    "MetadataStore",
    "ScramCredentials",
    "TransactionStore",
    "UsageReports",
]


@dataclass(frozen=True)
class ScramCredentials:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class AdminError(Exception):
    """A rejected admin request; ``error_code`` is the Kafka error to return."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class MetadataSource(Protocol):
    """Metadata as brokers see it.

    Every committed change to what brokers see bumps the store's metadata version (one
    counter for the whole cluster, increasing in commit order). A broker holding a
    snapshot at version ``v`` asks ``metadata_version()`` (cheap) and, only if it moved,
    ``changes_since(v)``; ``snapshot()`` is for the first read and for a delta that the
    store can no longer give. The live broker list is time-dependent (heartbeat leases
    lapse without any commit), so it is read on its own with ``live_brokers()``.
    """

    def snapshot(self) -> MetadataSnapshot: ...

    def wait_for_change(self, timeout: float) -> bool:
        """Block up to ``timeout`` s for a change notification (False: poll anyway)."""
        ...

    def metadata_version(self) -> int:
        """The version of the newest committed change (0 before any); one cheap read."""
        ...

    def changes_since(self, version: int) -> MetadataDelta | None:
        """What changed after ``version``, re-read; None if the store no longer knows
        (the change log was pruned past it, or it is from another store): take a
        ``snapshot()``."""
        ...

    def live_brokers(self) -> Mapping[int, BrokerInfo]:
        """The brokers counted as live right now (running, lease not expired)."""
        ...


class Credentials(Protocol):
    def scram_credentials(self, key_id: str, mechanism: str) -> ScramCredentials | None: ...

    def principal_for_key(self, key_id: str) -> Principal | None:
        """The key's principal if the key is active (not revoked, expired or deleted)."""
        ...

    def verify_plain(self, key_id: str, secret: str) -> Principal | None: ...

    def anonymous_principal(self) -> Principal | None:
        """The principal of the optional unauthenticated listener (``default`` tenant)."""
        ...


class BrokerRegistry(Protocol):
    def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None,
        tls_host: str | None = None,
        tls_port: int | None = None,
    ) -> None: ...

    def heartbeat(self, broker_id: int, metadata_version: int = 0) -> None:
        """Renew the broker's lease, saying which metadata version it has applied: its
        roles and logs match the metadata up to that version (a deleted topic's logs are
        gone from its disk; the tenant-deletion job waits for it)."""
        ...

    def controlled_shutdown(self, broker_id: int) -> int:
        """Stop counting this broker as live and move its leaderships to other in-sync
        replicas; returns how many partitions it still leads (no other ISR member)."""
        ...

    def deregister_broker(self, broker_id: int) -> None: ...

    def allocate_producer_ids(self, count: int) -> int:
        """Claim ``count`` producer ids; returns the first (the block is unique forever)."""
        ...

    def alter_partition(
        self,
        topic_id: str,
        index: int,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
    ) -> tuple[int, int, int, tuple[int, ...]]:
        """A leader's ISR proposal: (error, leader epoch, partition epoch, ISR) after it."""
        ...

    def assign_unassigned_partitions(self) -> int:
        """Place partitions that have no replicas yet over the live brokers; the count."""
        ...


class Admin(Protocol):
    """Admin requests, through the control plane's services (validation, tenant limits,
    audit). A refused request raises :class:`AdminError` and changes nothing;
    ``validate_only`` runs every check and changes nothing."""

    def create_topic(
        self,
        principal: Principal,
        name: str,
        partitions: int,
        replication_factor: int | None,
        configs: Mapping[str, str],
        validate_only: bool,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None: ...

    def delete_topic(self, principal: Principal, name: str) -> None: ...

    def create_partitions(
        self,
        principal: Principal,
        name: str,
        count: int,
        validate_only: bool,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None: ...

    def alter_topic_configs(
        self,
        principal: Principal,
        name: str,
        changes: Mapping[str, str | None],
        validate_only: bool,
    ) -> None: ...

    def create_acl(self, principal: Principal, binding: Any) -> None: ...

    def delete_acls(self, principal: Principal, matcher: Callable[[Any], bool]) -> list[Any]: ...

    def delete_group(self, principal: Principal, group_id: str) -> bool:
        """Delete an empty group (audited); False if none; AdminError if it has members."""
        ...

    def elect_leaders(
        self, principal: Principal, unclean: bool, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[str, dict[int, tuple[int, str | None]]]:
        """Kafka's ElectLeaders for an operator, over the tenant's topics ``partitions``
        (topic name -> indexes; None: every partition of the tenant): for each, the error
        code and message. Preferred: the first replica takes over if it is live and in the
        ISR (NONE), already leads (ELECTION_NOT_NEEDED) or cannot (PREFERRED_LEADER_NOT_
        AVAILABLE). Unclean (KIP-460), whatever ``unclean.leader.election.enable`` says: a
        partition with a live leader needs none (ELECTION_NOT_NEEDED); else the first live
        in-sync replica, else the first live replica (audited: records may be lost), else
        ELIGIBLE_LEADERS_NOT_AVAILABLE. Unknown topics and partitions:
        UNKNOWN_TOPIC_OR_PARTITION."""
        ...

    def alter_reassignments(
        self,
        principal: Principal,
        requests: Mapping[str, Mapping[int, Sequence[int] | None]],
    ) -> dict[str, dict[int, tuple[int, str | None]]]:
        """Kafka's AlterPartitionReassignments for an operator, over the tenant's topics
        (name -> partition index -> target replicas, None to cancel): for each, the error
        code and message. A target starts moving the partition (KIP-455: the new replicas
        copy the log, then the controller switches; audited); the same replicas change
        nothing. Refusals: UNKNOWN_TOPIC_OR_PARTITION; INVALID_REPLICA_ASSIGNMENT (empty,
        repeated, a broker neither live nor already a replica, or another replication
        factor); REASSIGNMENT_IN_PROGRESS (one is running: cancel it first);
        NO_REASSIGNMENT_IN_PROGRESS (a cancel with none running)."""
        ...

    def list_reassignments(
        self, principal: Principal, partitions: Mapping[str, Sequence[int]] | None
    ) -> dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]]:
        """The reassignments in progress among the tenant's ``partitions`` (None: all):
        topic -> index -> (replicas, adding, removing). Unknown topics and partitions, and
        those not being reassigned, are left out."""
        ...

    def fenced_brokers(self) -> Mapping[int, BrokerInfo]:
        """Registered brokers that are not live: fenced by the controller, shutting down
        or stopped, or with a lapsed lease (DescribeCluster v2's fenced brokers, KIP-1073;
        a KRaft broker stays registered, and fenced, until it is unregistered)."""
        ...

    def alter_client_quotas(
        self,
        principal: Principal,
        entity: Entity,
        changes: Mapping[str, float | None],
        validate_only: bool,
    ) -> None:
        """KIP-546's AlterClientQuotas for one entity of the principal's tenant (key ->
        new value, None to remove; audited). Refusals: INVALID_REQUEST (an unknown or
        unenforced key, a value not above 0), POLICY_VIOLATION (a byte rate above the
        tenant's own limit). The broker sees the result in ``TenantInfo.client_quotas``."""
        ...

    def audit(
        self,
        principal: Principal,
        action: str,
        object_type: str,
        object_repr: str,
        after: dict[str, Any],
    ) -> None:
        """Record an audit event for a change made in the data plane (DeleteRecords,
        OffsetDelete), with the acting principal."""
        ...


class ClientReports(Protocol):
    """Which client software, at which request versions, tenants' connections use
    (``data_plane.broker.client_versions``): for operators to see who must upgrade."""

    def report_clients(self, broker_id: int, uses: Sequence[ClientUse]) -> None:
        """Add one broker's counts since its last report: requests are summed with what
        is stored for the same identity and (API, version), first and last seen widened.
        Rows for unknown tenants are left out."""
        ...

    def reported_clients(self, tenant_id: int) -> list[ClientUse]:
        """What is stored for the tenant, one row per identity and (API, version), as the
        console shows it (``first_seen``/``last_seen`` over every report)."""
        ...


class UsageReports(Protocol):
    """The tenants' metered usage (``data_plane.broker.usage``), reported by each broker."""

    def report_usage(self, broker_id: int, report: UsageReport) -> None:
        """Store a report's rows: per (broker, incarnation, hour, tenant, topic, principal)
        the values of the highest ``seq`` seen win, so a report stored twice, or one older
        than what is stored, changes nothing. Rows of unknown tenants are left out."""
        ...

    def usage_totals(self, tenant_id: int) -> dict[str, int]:
        """Every reported row of the tenant summed, by counter (``usage.FIELDS``)."""
        ...


class TransactionStore(Protocol):
    """The transaction coordinators' durable state (``data_plane.txn``), one value per
    tenant and transactional id; producer ids come from ``allocate_producer_ids``."""

    def load_transaction(self, tenant_id: int, transactional_id: str) -> TxnMetadata | None: ...

    def save_transaction(self, txn: TxnMetadata) -> bool:
        """Make ``txn`` the id's state, durably, before the coordinator answers, if what
        is stored is its previous version (``txn.version - 1``; nothing stored counts as
        -1); else store nothing and say False (another coordinator wrote meanwhile)."""
        ...

    def list_transactions(self, tenant_id: int) -> list[TxnMetadata]:
        """Every transactional id of the tenant (ListTransactions), by id."""
        ...

    def unfinished_transactions(self) -> list[TxnMetadata]:
        """Every tenant's ids with a transaction in progress or being decided (their
        coordinators take them over and finish or time them out)."""
        ...

    def stage_txn_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        group_id: str,
        offsets: list[OffsetRecord],
        check: Callable[[TxnMetadata | None], int],
    ) -> int:
        """Keep a transaction's offset commits (TxnOffsetCommit) apart from the group's
        offsets until the transaction ends; a partition staged again is replaced. Only if
        ``check`` of the id's stored state says 0, with that state held still meanwhile
        (a transaction being decided cannot miss offsets staged as it is); else nothing
        is staged and ``check``'s error is returned."""
        ...

    def settle_txn_offsets(
        self,
        tenant_id: int,
        transactional_id: str,
        producer_id: int,
        group_id: str,
        commit: bool,
        check: Callable[[TxnMetadata | None], bool],
    ) -> bool:
        """The transaction ended: on commit its staged offsets become the group's (in one
        store transaction), on abort they are dropped; True. Only if ``check`` of the
        id's stored state says it still holds the decision being settled, with that state
        held still meanwhile: a deposed coordinator finishing a transaction its successor
        completed must not settle offsets the producer's next transaction staged; False,
        settling nothing, otherwise. Settling twice does nothing."""
        ...

    def pending_txn_partitions(self, tenant_id: int, group_id: str) -> set[tuple[str, int]]:
        """The (topic, partition)s with offsets staged by transactions not yet ended
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        ...


class MetadataStore(
    MetadataSource,
    Credentials,
    BrokerRegistry,
    Admin,
    GroupStore,
    ClientReports,
    TransactionStore,
    UsageReports,
    Protocol,
):
    """Every port at once: what ``manage.py broker`` hands the broker."""
