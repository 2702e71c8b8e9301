"""Console members and audit pages (Django's test client): roles as in the REST API, the
tenancy services' rules and messages, keyset pages of the audit log, htmx partials, and
tenant isolation.
"""

from __future__ import annotations

import re

from django.test import Client

from control_plane.access import services as access_services
from control_plane.audit.models import AuditEvent
from control_plane.audit.services import record_event
from control_plane.catalog import services as catalog_services
from control_plane.tenancy.models import Membership, Role
from tests.conftest import SYSTEM, make_user

MEMBERS = "/t/acme/members/"
AUDIT = "/t/acme/audit/"
HTMX = {"HTTP_HX_REQUEST": "true"}


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def membership(user) -> Membership:
    return Membership.objects.get(user=user)


def audit_rows(html: str) -> list[str]:
    """The audit table's rows, one string each (a row opens with its time as row header)."""
    return html.split('<th scope="row"><time')[1:]


# --- members ------------------------------------------------------------------------------


def test_viewer_sees_members_but_no_controls(owner, admin_user, viewer, tenant_a):
    client = signed_in(viewer)
    page = client.get(MEMBERS).content.decode()
    assert "olivia" in page and "Owner" in page
    # Other members' addresses are for operators and the members themselves.
    assert "adam@example.com" not in page
    assert "Add member" not in page and 'name="role"' not in page and "Remove" not in page
    assert 'href="/t/acme/audit/"' not in page  # the audit log is for admins
    target = membership(admin_user)
    assert client.post(MEMBERS + "add/", {"username": "dev", "role": "viewer"}).status_code == 403
    assert client.post(f"{MEMBERS}{target.pk}/role/", {"role": "viewer"}).status_code == 403
    assert client.get(f"{MEMBERS}{target.pk}/remove/").status_code == 403
    assert client.post(f"{MEMBERS}{target.pk}/remove/").status_code == 403
    assert membership(admin_user).role == Role.ADMIN
    assert Membership.objects.filter(tenant=tenant_a).count() == 3


def test_admin_adds_changes_and_removes_a_member(admin_user, tenant_a):
    newbie = make_user("newbie")
    client = signed_in(admin_user)
    page = client.get(MEMBERS).content.decode()
    assert "Add member" in page and 'href="/t/acme/audit/"' in page
    assert '<option value="owner"' not in page  # only owners grant owner

    response = client.post(MEMBERS + "add/", {"username": "newbie", "role": "developer"})
    assert response.status_code == 302 and response.url == MEMBERS
    added = Membership.objects.get(tenant=tenant_a, user=newbie)
    assert added.role == Role.DEVELOPER

    response = client.post(f"{MEMBERS}{added.pk}/role/", {"role": "viewer"}, follow=True)
    assert "newbie is now viewer" in response.content.decode()
    assert Membership.objects.get(pk=added.pk).role == Role.VIEWER

    confirm = client.get(f"{MEMBERS}{added.pk}/remove/").content.decode()
    assert "Remove newbie" in confirm
    assert Membership.objects.filter(pk=added.pk).exists()  # GET only asks
    response = client.post(f"{MEMBERS}{added.pk}/remove/", follow=True)
    assert "newbie removed from Acme" in response.content.decode()
    assert not Membership.objects.filter(pk=added.pk).exists()
    actions = set(
        AuditEvent.objects.filter(actor_user=admin_user, object_repr="newbie").values_list(
            "action", flat=True
        )
    )
    assert actions == {"member.add", "member.change_role", "member.remove"}


def test_add_by_email(admin_user, tenant_a):
    newbie = make_user("newbie")
    response = signed_in(admin_user).post(
        MEMBERS + "add/", {"username": "NEWBIE@example.com", "role": "viewer"}
    )
    assert response.status_code == 302
    assert Membership.objects.get(tenant=tenant_a, user=newbie).role == Role.VIEWER


def test_adding_tells_a_tenant_admin_nothing_about_which_accounts_exist(
    admin_user, developer, tenant_a
):
    """Until invitations (Step 15): an unknown account, an existing one and an existing
    member get the same answer; only the existing non-member is added."""
    client = signed_in(admin_user)
    make_user("newbie")
    answers = []
    for name in ("nobody", "newbie", "dev"):
        response = client.post(MEMBERS + "add/", {"username": name, "role": "viewer"}, follow=True)
        page = response.content.decode()
        answers.append((response.status_code, "If an account with that username" in page))
    assert answers == [(200, True)] * 3
    assert Membership.objects.get(tenant=tenant_a, user__username="newbie").role == Role.VIEWER
    assert not Membership.objects.filter(user__username="nobody").exists()
    assert membership(developer).role == Role.DEVELOPER  # the existing member is unchanged
    adds = AuditEvent.objects.filter(action="member.add", actor_user=admin_user)
    assert list(adds.values_list("object_repr", flat=True)) == ["newbie"]


def test_operators_still_get_precise_answers(tenant_a):
    operator = make_user("opal", staff=True)
    Membership.objects.create(tenant=tenant_a, user=operator, role=Role.ADMIN)
    response = signed_in(operator).post(
        MEMBERS + "add/", {"username": "nobody", "role": "developer"}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "no user named &#x27;nobody&#x27;" in page
    assert 'id="username-error"' in page and 'value="nobody"' in page


def test_duplicate_and_bad_role_are_reported_at_their_fields(admin_user, developer, tenant_a):
    client = signed_in(admin_user)
    make_user("newbie")
    response = client.post(MEMBERS + "add/", {"username": "newbie", "role": "emperor"})
    assert response.status_code == 400
    assert 'id="role-error"' in response.content.decode()
    assert not Membership.objects.filter(user__username="newbie").exists()
    assert membership(developer).role == Role.DEVELOPER


def test_admins_cannot_manage_owners(owner, admin_user, tenant_a):
    client = signed_in(admin_user)
    target = membership(owner)
    page = client.get(MEMBERS).content.decode()
    assert f'id="id_role_{target.pk}"' not in page
    assert f"{MEMBERS}{target.pk}/remove/" not in page
    assert f'id="id_role_{membership(admin_user).pk}"' in page
    # The server refuses anyway, with the service's message.
    response = client.post(f"{MEMBERS}{target.pk}/role/", {"role": "viewer"}, follow=True)
    assert "only owners can grant, change or remove the owner role" in response.content.decode()
    make_user("newbie")
    response = client.post(MEMBERS + "add/", {"username": "newbie", "role": "owner"})
    assert response.status_code == 400
    assert "only owners can grant" in response.content.decode()
    assert membership(owner).role == Role.OWNER
    assert not Membership.objects.filter(user__username="newbie").exists()


def test_the_last_owner_cannot_be_removed_or_demoted(owner, tenant_a):
    client = signed_in(owner)
    mine = membership(owner)
    response = client.post(f"{MEMBERS}{mine.pk}/remove/", follow=True)
    assert "a tenant must keep at least one owner" in response.content.decode()
    response = client.post(f"{MEMBERS}{mine.pk}/role/", {"role": "admin"}, follow=True)
    assert "a tenant must keep at least one owner" in response.content.decode()
    assert membership(owner).role == Role.OWNER


def test_other_tenants_members_do_not_exist(owner, admin_user, outsider, tenant_a, tenant_b):
    theirs = membership(outsider)
    client = signed_in(admin_user)
    assert client.post(f"{MEMBERS}{theirs.pk}/role/", {"role": "viewer"}).status_code == 404
    assert client.post(f"{MEMBERS}{theirs.pk}/remove/").status_code == 404
    assert "oscar" not in client.get(MEMBERS).content.decode()
    assert Membership.objects.get(pk=theirs.pk).role == Role.OWNER

    stranger = signed_in(outsider)
    mine = membership(admin_user)
    for url in (MEMBERS, f"{MEMBERS}{mine.pk}/remove/", AUDIT, AUDIT + "?action=member.add"):
        assert stranger.get(url).status_code == 404, url
    assert (
        stranger.post(MEMBERS + "add/", {"username": "oscar", "role": "owner"}).status_code == 404
    )
    assert stranger.post(f"{MEMBERS}{mine.pk}/role/", {"role": "viewer"}).status_code == 404
    assert stranger.post(f"{MEMBERS}{mine.pk}/remove/").status_code == 404
    assert membership(admin_user).role == Role.ADMIN
    assert not Membership.objects.filter(tenant=tenant_a, user=outsider).exists()


# --- audit log ----------------------------------------------------------------------------


def test_audit_log_is_for_admins(developer, viewer):
    assert signed_in(developer).get(AUDIT).status_code == 403
    assert signed_in(viewer).get(AUDIT, **HTMX).status_code == 403
    assert 'href="/t/acme/audit/"' not in signed_in(developer).get(MEMBERS).content.decode()


def test_admin_sees_and_filters_events(admin_user, developer, tenant_a):
    client = signed_in(admin_user)
    client.post(f"{MEMBERS}{membership(developer).pk}/role/", {"role": "viewer"})
    catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)

    page = client.get(AUDIT).content.decode()
    rows = audit_rows(page)
    assert any("member.change_role" in r and "adam" in r and "dev" in r for r in rows)
    assert any("topic.create" in r and "orders" in r and "System" in r for r in rows)
    assert "&quot;developer&quot;" in page and "&quot;viewer&quot;" in page  # the diff
    assert '<th scope="row" class="name">role</th>' in page

    by_action = "".join(
        audit_rows(client.get(AUDIT + "?action=member.change_role").content.decode())
    )
    assert "member.change_role" in by_action and "orders" not in by_action
    by_type = "".join(audit_rows(client.get(AUDIT + "?object_type=topic").content.decode()))
    assert "orders" in by_type and "member." not in by_type
    by_actor = "".join(audit_rows(client.get(AUDIT + "?actor=adam").content.decode()))
    assert "member.change_role" in by_actor and "topic.create" not in by_actor
    by_name = "".join(audit_rows(client.get(AUDIT + "?name=ORD").content.decode()))
    assert "orders" in by_name and "member.change_role" not in by_name
    future = client.get(AUDIT + "?since=2999-01-01T00:00").content.decode()
    assert audit_rows(future) == [] and "No event matches" in future
    past = client.get(AUDIT + "?until=2000-01-01T00:00").content.decode()
    assert audit_rows(past) == []


def test_htmx_gets_only_the_rows(admin_user, tenant_a):
    catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=1)
    client = signed_in(admin_user)
    partial = client.get(AUDIT + "?object_type=topic", **HTMX).content.decode()
    assert "<html" not in partial and "<form" not in partial
    assert "orders" in partial and 'id="audit"' in partial
    full = client.get(AUDIT + "?object_type=topic").content.decode()
    assert "<html" in full and 'name="object_type"' in full and "orders" in full


def test_bad_time_is_reported(admin_user):
    client = signed_in(admin_user)
    response = client.get(AUDIT + "?since=yesterday")
    assert response.status_code == 400
    assert "enter a date and time" in response.content.decode()
    # htmx 2 swaps only 2xx responses, so the partial carries the message with 200.
    response = client.get(AUDIT + "?since=yesterday", **HTMX)
    assert response.status_code == 200 and "enter a date and time" in response.content.decode()


def test_older_pages_follow_the_newest_without_overlap(admin_user, tenant_a):
    for i in range(60):
        record_event(
            SYSTEM,
            tenant=tenant_a,
            action="test.tick",
            object_type="tick",
            object_id=i,
            object_repr=f"tick-{i:02d}",
        )
    client = signed_in(admin_user)
    first = client.get(AUDIT + "?action=test.tick").content.decode()
    first_names = re.findall(r"tick-\d\d", "".join(audit_rows(first)))
    assert len(first_names) == 50 and first_names[0] == "tick-59"
    older = re.search(r'href="([^"]+)"[^>]*rel="next"', first).group(1).replace("&amp;", "&")
    assert "action=test.tick" in older and "before=" in older
    second = client.get(older, **HTMX).content.decode()
    second_names = re.findall(r"tick-\d\d", "".join(audit_rows(second)))
    assert second_names == [f"tick-{i:02d}" for i in range(9, -1, -1)]
    assert 'rel="next"' not in second and "Newest" in second


def test_audit_log_never_shows_key_secrets(admin_user, tenant_a):
    sa = access_services.create_service_account(SYSTEM, tenant_a, name="billing")
    created = access_services.create_api_key(SYSTEM, sa)
    page = signed_in(admin_user).get(AUDIT).content.decode()
    assert created.api_key.key_id in page  # the key's event is there
    assert created.secret not in page
    assert created.api_key.secret_hash not in page


def test_other_tenants_events_are_not_shown(owner, admin_user, outsider, tenant_a, tenant_b):
    catalog_services.create_topic(SYSTEM, tenant_a, name="acme-orders", partition_count=1)
    catalog_services.create_topic(SYSTEM, tenant_b, name="secret-plans", partition_count=1)
    theirs = signed_in(outsider).get("/t/globex/audit/").content.decode()
    assert "secret-plans" in theirs
    assert "acme-orders" not in theirs and "olivia" not in theirs and "adam" not in theirs
    mine = signed_in(admin_user).get(AUDIT + "?object_type=topic").content.decode()
    assert "acme-orders" in mine and "secret-plans" not in mine
    # A cursor naming another tenant's event does not page into it.
    other = AuditEvent.objects.filter(tenant=tenant_b).first()
    response = signed_in(admin_user).get(f"{AUDIT}?before={other.pk}")
    assert response.status_code == 400 and "secret-plans" not in response.content.decode()
