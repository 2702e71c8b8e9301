"""Tenant deletion in process (the brokers' side, real clients and a killed worker are in
tests/broker/test_tenant_deletion.py): who may, the typed confirmation, what happens at
once, every step of the job, resuming after a worker died, and the REST API and console."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from control_plane.access import services as access_services
from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.accounts.models import Invitation
from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Topic
from control_plane.core.actor import Actor
from control_plane.core.errors import Conflict, InvalidInput, NotPermitted
from control_plane.groups.models import CommittedOffset, ConsumerGroup
from control_plane.lifecycle import services as lifecycle
from control_plane.lifecycle import tasks
from control_plane.lifecycle.models import DeletionState, TenantDeletion
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import ClientQuota, Membership, Tenant
from control_plane.transactions.models import PendingTxnOffset, TransactionState
from tests.conftest import SYSTEM, session_client

T = "/api/v1/tenants/acme"


@pytest.fixture
def filled(tenant_a, owner, admin_user, make_key, settings, tmp_path):
    """Tenant A with topics, a group with offsets, transaction state, keys, ACLs, a
    quota, an open invitation and Connect files."""
    settings.MILLRACE_CONNECT_FILE_ROOT = str(tmp_path / "connect")
    settings.MILLRACE_DELETION_TOPIC_BATCH = 2
    topics = [
        catalog_services.create_topic(SYSTEM, tenant_a, name=f"t{i}", partition_count=2)
        for i in range(5)
    ]
    _, key, _ = make_key(tenant_a, [("topic", "literal", "*", "all")])
    group = ConsumerGroup.objects.create(tenant=tenant_a, group_id="g")
    CommittedOffset.objects.create(group=group, topic=topics[0], partition=0, offset=7)
    TransactionState.objects.create(
        tenant=tenant_a,
        transactional_id="tx",
        producer_id=1,
        producer_epoch=0,
        last_producer_epoch=-1,
        timeout_ms=60000,
        state="Ongoing",
    )
    PendingTxnOffset.objects.create(
        tenant=tenant_a, group_id="g", producer_id=1, topic="t0", partition=0, offset=3, commit_ms=1
    )
    ClientQuota.objects.create(tenant=tenant_a, user="app", key="producer_byte_rate", value=1e6)
    Invitation.objects.create(
        tenant=tenant_a,
        email="new@example.com",
        role="viewer",
        token_hash="0" * 64,
        expires_at=timezone.now() + timedelta(days=1),
    )
    files = tmp_path / "connect" / tenant_a.slug
    files.mkdir(parents=True)
    (files / "out.txt").write_text("records")
    return {"topics": topics, "key": key, "files": files}


def test_deleting_needs_the_owner_and_the_typed_slug(filled, tenant_a, owner, admin_user):
    with pytest.raises(NotPermitted):
        lifecycle.request_deletion(Actor(user=admin_user), tenant_a, confirm="acme")
    with pytest.raises(NotPermitted):
        lifecycle.request_deletion(Actor(api_key=filled["key"]), tenant_a, confirm="acme")
    for wrong in ("", "Acme", "acme-x", "Acme Inc"):
        with pytest.raises(InvalidInput) as err:
            lifecycle.request_deletion(Actor(user=owner), tenant_a, confirm=wrong)
        assert err.value.field == "confirm" and "acme" in err.value.message
    # Nothing changed: the next good request is not hindered by the refused ones.
    tenant = Tenant.objects.get(pk=tenant_a.pk)
    assert tenant.deletion_requested_at is None and tenant.suspended_at is None
    assert ApiKey.objects.get(pk=filled["key"].pk).revoked_at is None
    assert Membership.objects.filter(tenant=tenant_a).count() == 2
    assert not TenantDeletion.objects.filter(tenant_slug="acme").exists()
    lifecycle.request_deletion(Actor(user=owner), tenant_a, confirm=" acme ")
    assert TenantDeletion.objects.filter(tenant=tenant_a).count() == 1


def test_asking_cuts_the_tenant_off_at_once(filled, tenant_a, owner, operator):
    deletion = lifecycle.request_deletion(Actor(user=owner), tenant_a, confirm="acme")
    tenant = Tenant.objects.get(pk=tenant_a.pk)
    assert tenant.deletion_requested_at is not None
    # Brokers refuse it and close its connections with no grace for reading.
    assert tenant.suspension_reason == lifecycle.DELETING
    assert tenant.reads_until <= timezone.now()
    assert not ApiKey.objects.filter(tenant=tenant_a, revoked_at__isnull=True).exists()
    assert not Membership.objects.filter(tenant=tenant_a).exists()
    assert not Invitation.objects.filter(tenant=tenant_a).exists()
    assert deletion.state == DeletionState.PENDING and deletion.progress["keys"]["revoked"] == 1
    event = AuditEvent.objects.get(tenant=tenant_a, action="tenant.delete")
    assert sorted(event.before["members"]) == [["adam", "admin"], ["olivia", "owner"]]
    # Asked again (by an operator): the same deletion; operators cannot resume or suspend it.
    again = lifecycle.request_deletion(Actor(user=operator), tenant_a, confirm="")
    assert again.pk == deletion.pk
    with pytest.raises(Conflict):
        tenancy_services.resume_tenant(Actor(user=operator), tenant)
    with pytest.raises(Conflict):
        tenancy_services.suspend_tenant(
            Actor(user=operator), tenant, reason="x", read_grace_seconds=60
        )
    with pytest.raises(Conflict):
        tenancy_services.add_member(SYSTEM, tenant, user=owner, role="viewer")


def _remains(pk: int, slug: str) -> dict[str, int]:
    return {
        "tenant": Tenant.objects.filter(pk=pk).count(),
        "topics": Topic.objects.filter(tenant_id=pk).count(),
        "groups": ConsumerGroup.objects.filter(tenant_id=pk).count(),
        "offsets": CommittedOffset.objects.filter(group__tenant_id=pk).count(),
        "transactions": TransactionState.objects.filter(tenant_id=pk).count(),
        "pending_offsets": PendingTxnOffset.objects.filter(tenant_id=pk).count(),
        "service_accounts": ServiceAccount.objects.filter(tenant_id=pk).count(),
        "keys": ApiKey.objects.filter(tenant_id=pk).count(),
        "acls": Acl.objects.filter(tenant_id=pk).count(),
        "quotas": ClientQuota.objects.filter(tenant_id=pk).count(),
        "members": Membership.objects.filter(tenant_id=pk).count(),
    }


def test_the_job_removes_everything_but_the_audit_trail(filled, tenant_a, tenant_b, owner):
    other = catalog_services.create_topic(SYSTEM, tenant_b, name="t0", partition_count=1)
    deletion = lifecycle.request_deletion(Actor(user=owner), tenant_a, confirm="acme")
    pk = tenant_a.pk
    assert lifecycle.run_deletion(deletion.pk) is True
    assert set(_remains(pk, "acme").values()) == {0}
    assert not filled["files"].exists()
    done = TenantDeletion.objects.get(pk=deletion.pk)
    assert done.state == DeletionState.DONE and done.tenant is None and done.finished_at
    assert done.progress["topics"] == {
        "done": 5,
        "total": 5,
        "connect": 0,
        **{k: v for k, v in done.progress["topics"].items() if k in ("brokers", "behind")},
    }
    assert done.progress["groups"]["deleted"] == 1
    assert done.progress["transactions"]["deleted"] == 2
    assert done.progress["connect"]["files_removed"] is True
    # The audit trail stays, named by the slug (its tenant column emptied).
    trail = AuditEvent.objects.filter(tenant_slug="acme")
    assert trail.filter(action="tenant.deleted").count() == 1
    assert trail.filter(action="topic.delete").count() == 5
    assert not trail.filter(tenant__isnull=False).exists()
    # Another tenant untouched; the slug is free again.
    assert Topic.objects.filter(pk=other.pk).exists()
    assert tenancy_services.create_tenant(SYSTEM, slug="acme", name="Acme again").pk != pk
    # A finished deletion is not taken up again.
    assert lifecycle.run_deletion(deletion.pk) is False


def test_a_deletion_whose_worker_died_is_resumed_where_it_stopped(filled, tenant_a, owner):
    deletion = lifecycle.request_deletion(Actor(user=owner), tenant_a, confirm="acme")
    real = catalog_services.delete_topic
    calls = []

    def dying(actor, topic):
        calls.append(topic.name)
        if len(calls) == 3:
            raise SystemExit("the worker was killed")  # not an Exception: no cleanup runs
        return real(actor, topic)

    with mock.patch.object(lifecycle, "delete_topic", dying), pytest.raises(SystemExit):
        lifecycle.run_deletion(deletion.pk)
    stopped = TenantDeletion.objects.get(pk=deletion.pk)
    assert stopped.state == DeletionState.RUNNING and stopped.step == "topics"
    assert stopped.progress["topics"]["done"] == 2 and stopped.lease_until > timezone.now()
    # While its lease holds nobody takes it over, and the sweep leaves it alone.
    assert lifecycle.claim(deletion.pk) is None
    with mock.patch.object(tasks.delete_tenant, "delay") as queued:
        tasks.resume_deletions()
    assert mock.call(str(deletion.pk)) not in queued.call_args_list
    # The lease lapses: the sweep queues it and a worker finishes it from the topics step.
    TenantDeletion.objects.filter(pk=deletion.pk).update(
        lease_until=timezone.now() - timedelta(seconds=1)
    )
    with mock.patch.object(tasks.delete_tenant, "delay") as queued:
        tasks.resume_deletions()
    assert queued.call_args_list.count(mock.call(str(deletion.pk))) == 1
    assert tasks.delete_tenant(str(deletion.pk)) is True
    done = TenantDeletion.objects.get(pk=deletion.pk)
    assert done.state == DeletionState.DONE and done.attempts == 2
    assert done.progress["topics"]["done"] == 5 and done.progress["topics"]["total"] == 5
    assert set(_remains(tenant_a.pk, "acme").values()) == {0}


def test_a_failing_step_is_recorded_and_retried_later(filled, tenant_a, owner):
    deletion = lifecycle.request_deletion(Actor(user=owner), tenant_a, confirm="acme")
    with (
        mock.patch.dict(
            lifecycle.STEP_FUNCTIONS, {"groups": mock.Mock(side_effect=RuntimeError("db gone"))}
        ),
        pytest.raises(RuntimeError),
    ):
        lifecycle.run_deletion(deletion.pk)
    failed = TenantDeletion.objects.get(pk=deletion.pk)
    assert failed.last_error == "groups: db gone" and failed.state == DeletionState.RUNNING
    TenantDeletion.objects.filter(pk=deletion.pk).update(lease_until=None)
    assert lifecycle.run_deletion(deletion.pk) is True
    assert TenantDeletion.objects.get(pk=deletion.pk).last_error == ""


def test_rest_delete_and_progress(filled, tenant_a, owner, admin_user, outsider, operator):
    assert (
        session_client(admin_user).delete(f"{T}/", {"confirm": "acme"}, format="json").status_code
        == 403
    )
    assert (
        session_client(outsider).delete(f"{T}/", {"confirm": "acme"}, format="json").status_code
        == 404
    )
    wrong = session_client(owner).delete(f"{T}/", {"confirm": "acm"}, format="json")
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid"
    assert Tenant.objects.get(pk=tenant_a.pk).deletion_requested_at is None
    response = session_client(owner).delete(f"{T}/?confirm=acme")
    assert response.status_code == 202, response.content
    body = response.json()
    assert (
        body["tenant"] == "acme" and body["state"] == "pending" and body["requested_by"] == "olivia"
    )
    assert response["Location"] == f"/api/v1/tenant-deletions/{body['id']}/"
    # The owner follows it; the tenant is gone from their list; others do not see it.
    mine = session_client(owner).get(response["Location"])
    assert mine.status_code == 200 and mine.json()["id"] == body["id"]
    assert [
        t["slug"] for t in session_client(owner).get("/api/v1/tenants/").json()["results"]
    ] == []
    assert session_client(admin_user).get(response["Location"]).status_code == 404
    assert session_client(admin_user).get("/api/v1/tenant-deletions/").json()["results"] == []
    listed = session_client(operator).get("/api/v1/tenant-deletions/").json()["results"]
    assert body["id"] in [d["id"] for d in listed]  # (with any other tests' deletions)
    staff_view = session_client(operator).get(f"{T}/").json()
    assert staff_view["deletion_requested_at"] is not None
    keyed = ApiKey.objects.get(pk=filled["key"].pk)
    assert keyed.revoked_at is not None


def test_console_settings_page_and_progress(filled, tenant_a, owner, admin_user):
    admin = Client()
    admin.force_login(admin_user)
    page = admin.get("/t/acme/settings/")
    assert page.status_code == 200 and b"Delete this tenant" not in page.content
    assert admin.post("/t/acme/settings/delete/", {"confirm": "acme"}).status_code == 403
    console = Client()
    console.force_login(owner)
    page = console.get("/t/acme/settings/")
    assert page.status_code == 200 and b"Delete this tenant" in page.content
    assert b'id="tenant-glance"' in page.content and b"(1 invited)" in page.content
    wrong = console.post("/t/acme/settings/delete/", {"confirm": "nope"})
    assert wrong.status_code == 400 and b"to confirm its deletion" in wrong.content
    assert Tenant.objects.get(pk=tenant_a.pk).deletion_requested_at is None
    response = console.post("/t/acme/settings/delete/", {"confirm": "acme"})
    deletion = TenantDeletion.objects.get(tenant_slug="acme")
    assert response.status_code == 302 and response["Location"] == f"/deletions/{deletion.pk}/"
    progress = console.get(response["Location"])
    assert progress.status_code == 200 and b"Deleting Acme" in progress.content
    assert b'http-equiv="refresh"' in progress.content
    assert admin.get(response["Location"]).status_code == 403
    assert console.get("/t/acme/settings/").status_code == 404  # no longer a member
    lifecycle.run_deletion(deletion.pk)
    finished = console.get(response["Location"])
    assert (
        b"Acme is deleted" in finished.content and b'http-equiv="refresh"' not in finished.content
    )
    assert b"5 of 5 topics deleted" in finished.content


def test_access_keys_made_in_flight_are_revoked_by_the_job(filled, tenant_a, owner):
    deletion = lifecycle.request_deletion(Actor(user=owner), tenant_a, confirm="acme")
    sa = ServiceAccount.objects.filter(tenant=tenant_a).first()
    late = access_services.create_api_key(SYSTEM, sa).api_key
    run = lifecycle._Run(lifecycle.claim(deletion.pk), "")
    lifecycle._step_keys(run)
    assert ApiKey.objects.get(pk=late.pk).revoked_at is not None
    assert run.deletion.progress["keys"]["revoked"] == 2
