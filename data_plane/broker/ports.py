"""The narrow interface the broker needs from the metadata store.

Implementations: the Django/Postgres adapter in ``control_plane.core.broker_store`` and an
in-memory one for tests. Methods are synchronous (the broker calls them from worker threads,
never on its event loop) and return plain values from :mod:`data_plane.metadata.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from data_plane.groups.model import GroupRecord, OffsetRecord
from data_plane.metadata.model import MetadataSnapshot, Principal


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


class MetadataStore(Protocol):
    def snapshot(self) -> MetadataSnapshot: ...

    def wait_for_change(self, timeout: float) -> bool:
        """Block up to ``timeout`` s for a change notification (False: poll anyway)."""
        ...

    # --- authentication ---------------------------------------------------------------
    def scram_credentials(self, key_id: str, mechanism: str) -> ScramCredentials | None: ...

    def principal_for_key(self, key_id: str) -> Principal | None:
        """The key's principal if the key is active (not revoked, expired or deleted)."""
        ...

    def verify_plain(self, key_id: str, secret: str) -> Principal | None: ...

    def anonymous_principal(self) -> Principal | None:
        """The principal of the optional unauthenticated listener (``default`` tenant)."""
        ...

    # --- brokers ------------------------------------------------------------------------
    def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None,
        tls_host: str | None = None,
        tls_port: int | None = None,
    ) -> None: ...

    def heartbeat(self, broker_id: int) -> None: ...

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

    # --- admin, through the control plane's services (audit included) -------------------
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

    # Consumer groups (the coordinator's GroupStore) -------------------------------------

    def load_group(self, tenant_id: int, group_id: str) -> GroupRecord | None: ...

    def save_group(self, record: GroupRecord) -> None: ...

    def commit_offsets(
        self, tenant_id: int, group_id: str, offsets: list[OffsetRecord]
    ) -> None: ...

    def fetch_offsets(self, tenant_id: int, group_id: str) -> list[OffsetRecord]: ...

    def delete_offsets(
        self, tenant_id: int, group_id: str, partitions: list[tuple[str, int]]
    ) -> None: ...

    def list_groups(self, tenant_id: int) -> list[GroupRecord]: ...

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

    def delete_group(self, principal: Principal, group_id: str) -> bool:
        """Delete an empty group (audited); False if none; AdminError if it has members."""
        ...
