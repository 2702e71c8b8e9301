"""Deleting a tenant (docs/accounts.md, "Deleting a tenant").

``request_deletion`` does at once, in one transaction, what must not wait: the tenant is
suspended with no grace for reading (brokers refuse its produce and new connections and
close its open connections), every API key is revoked (its WebSocket streams close), open
invitations are withdrawn and the members removed, so nobody can add anything to it. It
then hands the rest to a Celery job (``tasks.delete_tenant``), which runs ``STEPS``:

* ``keys``: revoke any key still active (an API key created by a request in flight);
* ``topics``: delete the topics in batches from the metadata (the tenant's Connect
  cluster's topics among them, which stops its Connect worker); after each batch the
  job waits until every live broker has applied it, so the logs are off their disks;
* ``groups`` and ``transactions``: the committed offsets and transaction state;
* ``connect``: the tenant's directory under the Connect file root;
* ``tenant``: the tenant's row and everything still hanging off it (service accounts,
  ACLs, client quotas, samples, metered usage), with a last audit event. The audit
  trail stays: events keep the tenant's slug when the tenant row goes;
* ``brokers``: wait until every live broker has dropped the tenant (a broker that is
  down deletes the logs of topics it no longer finds when it starts).

Every step can run again from its start; a worker killed mid-way leaves the deletion's
lease to lapse and ``resume_deletions`` gives it to another worker.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from control_plane.access.models import ApiKey
from control_plane.access.services import revoke_api_key
from control_plane.accounts.models import Invitation
from control_plane.audit.services import record_event
from control_plane.catalog.models import Broker, Topic
from control_plane.catalog.services import delete_topic
from control_plane.core.actor import Actor
from control_plane.core.errors import InvalidInput, NotPermitted
from control_plane.core.models import MetadataChange
from control_plane.core.notify import notify_metadata_changed
from control_plane.groups.models import ConsumerGroup
from control_plane.lifecycle.models import STEPS, DeletionState, TenantDeletion
from control_plane.tenancy.models import Membership, Role, Tenant
from control_plane.tenancy.services import role_of, tenant_snapshot
from control_plane.transactions.models import PendingTxnOffset, TransactionState
from control_plane.usage import services as usage_services
from data_plane.internal_auth import CONNECT_TOPICS

logger = logging.getLogger("millrace.lifecycle")

SYSTEM = Actor.system()
DELETING = "it is being deleted"  # the suspension reason brokers give its clients


def deletion_snapshot(deletion: TenantDeletion) -> dict[str, Any]:
    return {
        "id": str(deletion.id),
        "tenant": deletion.tenant_slug,
        "state": deletion.state,
        "step": deletion.step,
        "progress": deletion.progress,
    }


def check_may_delete(actor: Actor, tenant: Tenant) -> None:
    """Owners delete their tenant; operators (staff) any tenant; API keys never."""
    if actor.api_key is not None:
        raise NotPermitted("API keys cannot delete tenants")
    if actor.user is None or actor.is_staff:
        return
    if role_of(actor.user, tenant) != Role.OWNER:
        raise NotPermitted("deleting a tenant needs the owner role")


@transaction.atomic
def request_deletion(actor: Actor, tenant: Tenant, *, confirm: str) -> TenantDeletion:
    """Cut the tenant off now and start the job that deletes it; returns the deletion
    (the one already under way when asked twice).

    ``confirm`` must be the tenant's slug, typed by the person (as GitHub asks for a
    repository's name): nothing is changed otherwise."""
    check_may_delete(actor, tenant)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    existing = TenantDeletion.objects.filter(tenant=tenant).first()
    if existing is not None:
        return existing
    if (confirm or "").strip() != tenant.slug:
        raise InvalidInput(
            f"type the tenant's name, {tenant.slug}, to confirm its deletion", field="confirm"
        )
    now = timezone.now()
    members = list(
        Membership.objects.filter(tenant=tenant)
        .select_related("user")
        .values_list("user__username", "role")
    )
    before = {**tenant_snapshot(tenant), "members": [list(m) for m in members]}
    tenant.deletion_requested_at = now
    tenant.suspended_at = tenant.suspended_at or now
    tenant.suspension_reason = DELETING
    tenant.reads_until = now  # no grace: its open connections close at once
    tenant.save(
        update_fields=["deletion_requested_at", "suspended_at", "suspension_reason", "reads_until"]
    )
    notify_metadata_changed("tenant.updated", tenant=tenant.pk)
    revoked = _revoke_keys(actor, tenant)
    Invitation.objects.filter(tenant=tenant, accepted_at__isnull=True).delete()
    Membership.objects.filter(tenant=tenant).delete()
    deletion = TenantDeletion.objects.create(
        tenant=tenant,
        tenant_slug=tenant.slug,
        tenant_name=tenant.name,
        tenant_pk=tenant.pk,
        requested_by=actor.user,
        requested_by_name=actor.label,
        progress={"keys": {"revoked": revoked}},
    )
    record_event(
        actor,
        tenant=tenant,
        action="tenant.delete",
        object_type="tenant",
        object_id=tenant.pk,
        object_repr=tenant.slug,
        before=before,
        after=deletion_snapshot(deletion),
    )
    transaction.on_commit(lambda: _enqueue(deletion.pk))
    return deletion


def _enqueue(deletion_id: object) -> None:
    from control_plane.lifecycle.tasks import delete_tenant

    try:
        delete_tenant.delay(str(deletion_id))
    except Exception:  # noqa: BLE001 - the beat's resume_deletions picks it up
        logger.warning("could not queue deletion %s; it is resumed later", deletion_id)


def _revoke_keys(actor: Actor, tenant: Tenant) -> int:
    keys = list(ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True))
    for key in keys:
        revoke_api_key(actor, key)
    return len(keys)


# --- the job -------------------------------------------------------------------------------


def lease_seconds() -> int:
    return int(settings.MILLRACE_DELETION_LEASE_SECONDS)


class _Run:
    """One worker's run of a deletion: progress is saved (and the lease renewed) as the
    steps go. The lease is renewed only while this worker still holds it."""

    def __init__(self, deletion: TenantDeletion, worker: str) -> None:
        self.deletion = deletion
        self.worker = worker

    def save(self, step: str, **progress: Any) -> None:
        d = self.deletion
        d.step = step
        if progress:
            d.progress = {**d.progress, step: {**d.progress.get(step, {}), **progress}}
        d.lease_until = timezone.now() + timedelta(seconds=lease_seconds())
        updated = TenantDeletion.objects.filter(pk=d.pk, state=DeletionState.RUNNING).update(
            step=d.step, progress=d.progress, lease_until=d.lease_until
        )
        if not updated:
            raise LostLease(f"deletion {d.pk} is no longer running here")


class LostLease(Exception):
    pass


def claim(deletion_id: object, *, worker: str = "") -> TenantDeletion | None:
    """Take the deletion if nobody holds it (its lease lapsed or was never taken)."""
    now = timezone.now()
    with transaction.atomic():
        deletion = (
            TenantDeletion.objects.select_for_update(skip_locked=True)
            .filter(pk=deletion_id)
            .exclude(state=DeletionState.DONE)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
            .first()
        )
        if deletion is None:
            return None
        deletion.state = DeletionState.RUNNING
        deletion.attempts += 1
        deletion.lease_until = now + timedelta(seconds=lease_seconds())
        deletion.save(update_fields=["state", "attempts", "lease_until"])
    logger.info(
        "deletion of tenant %s: attempt %d from step %r%s",
        deletion.tenant_slug,
        deletion.attempts,
        deletion.step or STEPS[0],
        f" on {worker}" if worker else "",
    )
    return deletion


def run_deletion(deletion_id: object, *, worker: str = "") -> bool:
    """Run the deletion's remaining steps if nobody else is; True when it is done."""
    deletion = claim(deletion_id, worker=worker)
    if deletion is None:
        return False
    run = _Run(deletion, worker)
    start = STEPS.index(deletion.step) if deletion.step in STEPS else 0
    try:
        for step in STEPS[start:]:
            run.save(step)
            STEP_FUNCTIONS[step](run)
    except LostLease:
        logger.warning("deletion of tenant %s: another worker took it over", deletion.tenant_slug)
        return False
    except Exception as exc:
        # Let the lease lapse soon (not at once: a failing step is not retried in a loop).
        TenantDeletion.objects.filter(pk=deletion.pk).update(
            last_error=f"{run.deletion.step}: {exc}"[:2000],
            lease_until=timezone.now() + timedelta(seconds=min(lease_seconds(), 30)),
        )
        raise
    TenantDeletion.objects.filter(pk=deletion.pk).update(
        state=DeletionState.DONE, finished_at=timezone.now(), lease_until=None, last_error=""
    )
    logger.info("deletion of tenant %s: done", deletion.tenant_slug)
    return True


def unfinished(now: Any = None) -> list[TenantDeletion]:
    """Deletions no worker holds: never started, or their worker's lease lapsed."""
    now = now or timezone.now()
    return list(
        TenantDeletion.objects.exclude(state=DeletionState.DONE).filter(
            Q(lease_until__isnull=True) | Q(lease_until__lt=now)
        )
    )


def _retrying(fn: Callable[[], Any], attempts: int = 5) -> Any:
    """Run ``fn`` in a transaction, again when Postgres broke a deadlock with a broker's
    session (a coordinator settling offsets locks a transaction row, then its offsets)."""
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                return fn()
        except OperationalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    return None


def _step_keys(run: _Run) -> None:
    tenant = _tenant(run)
    if tenant is not None:
        revoked = _retrying(lambda: _revoke_keys(SYSTEM, tenant))
        if revoked:
            before = run.deletion.progress.get("keys", {}).get("revoked", 0)
            run.save("keys", revoked=before + revoked)


def _step_topics(run: _Run) -> None:
    pk = run.deletion.tenant_pk
    remaining = Topic.objects.filter(tenant_id=pk)
    done = run.deletion.progress.get("topics", {}).get("done", 0)
    connect = run.deletion.progress.get("topics", {}).get("connect", 0)
    run.save("topics", done=done, total=done + remaining.count(), connect=connect)
    batch = max(1, int(settings.MILLRACE_DELETION_TOPIC_BATCH))
    while True:
        topics = list(remaining.order_by("pk")[:batch])
        if not topics:
            return
        for topic in topics:
            with transaction.atomic():
                delete_topic(SYSTEM, topic)
            done += 1
            connect += topic.name in CONNECT_TOPICS
        run.save("topics", done=done, connect=connect)
        # The brokers delete the logs when they apply the change: wait for them before
        # the next batch, so the disks are not asked to delete everything at once.
        _wait_for_brokers(run, "topics")


def _step_groups(run: _Run) -> None:
    groups = ConsumerGroup.objects.filter(tenant_id=run.deletion.tenant_pk)
    deleted = run.deletion.progress.get("groups", {}).get("deleted", 0)
    while True:
        ids = list(groups.values_list("pk", flat=True)[:500])
        if not ids:
            break
        _retrying(lambda ids=ids: ConsumerGroup.objects.filter(pk__in=ids).delete())
        deleted += len(ids)
        run.save("groups", deleted=deleted)
    run.save("groups", deleted=deleted)


def _step_transactions(run: _Run) -> None:
    pk = run.deletion.tenant_pk

    def delete() -> int:
        # The transaction rows first (a coordinator locks a transaction, then its offsets).
        count = TransactionState.objects.filter(tenant_id=pk).delete()[0]
        return count + PendingTxnOffset.objects.filter(tenant_id=pk).delete()[0]

    before = run.deletion.progress.get("transactions", {}).get("deleted", 0)
    run.save("transactions", deleted=before + _retrying(delete))


def _step_connect(run: _Run) -> None:
    root = Path(settings.MILLRACE_CONNECT_FILE_ROOT) / run.deletion.tenant_slug
    removed = root.is_dir()
    if removed:
        shutil.rmtree(root, ignore_errors=True)
    previous = run.deletion.progress.get("connect", {}).get("files_removed", False)
    run.save("connect", files_removed=previous or removed)


def _step_tenant(run: _Run) -> None:
    def delete() -> bool:
        tenant = Tenant.objects.select_for_update().filter(pk=run.deletion.tenant_pk).first()
        if tenant is None:
            return False
        for topic in Topic.objects.filter(tenant=tenant):  # made by a request in flight
            delete_topic(SYSTEM, topic)
        record_event(
            SYSTEM,
            tenant=tenant,
            action="tenant.deleted",
            object_type="tenant",
            object_id=tenant.pk,
            object_repr=tenant.slug,
            before={"deletion": str(run.deletion.pk)},
        )
        notify_metadata_changed("tenant.deleted", tenant=tenant.pk)
        usage_services.forget_tenant(tenant.pk)  # its hourly rows go with its row
        tenant.delete()
        return True

    if _retrying(delete):
        run.save("tenant", deleted=True)


def _step_brokers(run: _Run) -> None:
    _wait_for_brokers(run, "brokers")


def _tenant(run: _Run) -> Tenant | None:
    return Tenant.objects.filter(pk=run.deletion.tenant_pk).first()


def _wait_for_brokers(run: _Run, step: str) -> None:
    """Wait until every live broker has applied the metadata as it is now (its logs of
    deleted topics are gone then), at most MILLRACE_DELETION_BROKER_WAIT_SECONDS. A broker
    that does not say so in time is named in the progress; it deletes the logs when it
    next reads the metadata, at the latest when it starts."""
    target = MetadataChange.objects.aggregate(v=Max("version"))["v"] or 0
    deadline = time.monotonic() + float(settings.MILLRACE_DELETION_BROKER_WAIT_SECONDS)
    lease = settings.MILLRACE_BROKER_LEASE_SECONDS
    while True:
        live = dict(Broker.objects.live(lease).values_list("id", "metadata_version"))
        behind = sorted(b for b, version in live.items() if version < target)
        if not behind:
            run.save(step, brokers=sorted(live), behind=[])
            return
        if time.monotonic() >= deadline:
            logger.warning(
                "deletion of tenant %s: brokers %s did not apply metadata version %d in time",
                run.deletion.tenant_slug,
                behind,
                target,
            )
            run.save(step, brokers=sorted(live), behind=behind)
            return
        run.save(step)  # renews the lease
        time.sleep(0.25)


STEP_FUNCTIONS: dict[str, Callable[[_Run], None]] = {
    "keys": _step_keys,
    "topics": _step_topics,
    "groups": _step_groups,
    "transactions": _step_transactions,
    "connect": _step_connect,
    "tenant": _step_tenant,
    "brokers": _step_brokers,
}
