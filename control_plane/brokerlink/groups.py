"""The group coordinator's persistence (``data_plane.groups.coordinator.GroupStore``)
over ``control_plane.groups``: group rows and committed offsets."""

from __future__ import annotations

from django.db import close_old_connections

from control_plane.groups import services as group_services
from data_plane.groups.model import GroupRecord, OffsetRecord


class DjangoGroupStore:
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
