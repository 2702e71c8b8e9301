"""The metadata change log behind ``changes_since``: versions stamped at commit, gapless,
unique under concurrent writers; rolled-back changes leave nothing; pruning sends a broker
that fell behind to a full snapshot."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from control_plane.brokerlink.store import DjangoMetadataStore
from control_plane.core.models import MetadataChange, MetadataScope
from control_plane.core.notify import notify_metadata_changed, prune_metadata_changes

pytestmark = pytest.mark.django_db(transaction=True)


def versions() -> list[int]:
    return list(MetadataChange.objects.values_list("version", flat=True))


def test_versions_are_stamped_at_commit_and_rolled_back_changes_leave_nothing() -> None:
    store = DjangoMetadataStore()
    start = store.metadata_version()
    with transaction.atomic():
        notify_metadata_changed("tenant.updated", tenant=1)
        notify_metadata_changed("access.service_account_deleted", tenant=1)  # keys + ACLs
        if connection.vendor == "postgresql":
            # Not stamped before the commit: no reader can see a version that may vanish.
            assert MetadataChange.objects.filter(version__isnull=True).count() == 3
    assert store.metadata_version() == start + 3
    assert versions()[-3:] == [start + 1, start + 2, start + 3]
    assert list(MetadataChange.objects.values_list("scope", flat=True))[-3:] == [
        MetadataScope.TENANT,
        MetadataScope.KEYS,
        MetadataScope.ACLS,
    ]

    with pytest.raises(RuntimeError), transaction.atomic():
        notify_metadata_changed("tenant.updated", tenant=1)
        raise RuntimeError
    assert store.metadata_version() == start + 3
    notify_metadata_changed("tenant.updated", tenant=2)
    assert store.metadata_version() == start + 4  # no gap where the rollback was


def test_concurrent_writers_get_unique_gapless_versions() -> None:
    errors: list[BaseException] = []

    def write(tenant_id: int) -> None:
        try:
            for _ in range(15):
                with transaction.atomic():
                    notify_metadata_changed("access.acls_changed", tenant=tenant_id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    stamped = versions()
    assert len(stamped) == 60
    assert stamped == list(range(stamped[0], stamped[0] + 60))


def test_a_change_without_its_scope_makes_brokers_read_everything() -> None:
    store = DjangoMetadataStore()
    mark = store.metadata_version()
    notify_metadata_changed("access.acls_changed")  # no tenant: cannot say which
    assert MetadataChange.objects.get(version=mark + 1).scope == MetadataScope.ALL
    assert store.changes_since(mark) is None


def test_pruning_sends_a_broker_that_fell_behind_to_a_snapshot(settings) -> None:
    settings.MILLRACE_METADATA_CHANGE_RETENTION_SECONDS = 60
    store = DjangoMetadataStore()
    for tenant_id in range(5):
        notify_metadata_changed("tenant.updated", tenant=tenant_id)
    first, newest = versions()[0], store.metadata_version()
    MetadataChange.objects.update(created_at=timezone.now() - timedelta(hours=1))
    assert prune_metadata_changes() == 4
    assert versions() == [newest]  # the newest stays: the version never goes back
    assert store.metadata_version() == newest
    assert store.changes_since(first) is None
    assert store.changes_since(newest - 1) is not None
    delta = store.changes_since(newest)
    assert delta is not None and delta.empty
