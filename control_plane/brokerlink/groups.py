"""The group coordinator's persistence (``data_plane.groups.coordinator.GroupStore``)
over ``control_plane.groups``: group rows and committed offsets."""

from __future__ import annotations

from control_plane.brokerlink.connections import fresh_connection
from control_plane.groups import services as group_services
from data_plane.groups.model import GroupRecord, OffsetRecord


class DjangoGroupStore:
    def load_group(self, tenant_id: int, group_id: str) -> GroupRecord | None:
        fresh_connection()
        return group_services.load_group(tenant_id, group_id)

    def save_group(self, record: GroupRecord) -> None:
        fresh_connection()
        group_services.store_group(record)

    def commit_offsets(self, tenant_id: int, group_id: str, offsets: list[OffsetRecord]) -> None:
        fresh_connection()
        group_services.store_offsets(tenant_id, group_id, offsets)

    def fetch_offsets(self, tenant_id: int, group_id: str) -> list[OffsetRecord]:
        fresh_connection()
        return group_services.load_offsets(tenant_id, group_id)

    def delete_offsets(
        self, tenant_id: int, group_id: str, partitions: list[tuple[str, int]]
    ) -> None:
        fresh_connection()
        group_services.remove_offsets(tenant_id, group_id, partitions)

    def list_groups(self, tenant_id: int) -> list[GroupRecord]:
        fresh_connection()
        return group_services.list_group_records(tenant_id)
