"""Accounts in process (Django's test client, mail in Django's test outbox): sign-up and
verification, a tenant of one's own, invitations, lockout, password change and reset,
and the REST API's invitations for every role, an outsider and an API key."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from control_plane.accounts import services as accounts
from control_plane.accounts.models import Account, Invitation
from control_plane.audit.models import AuditEvent
from control_plane.tenancy.models import Membership, Role, Tenant
from tests.conftest import session_client

pytestmark = pytest.mark.django_db
PASSWORD = "a-Long-and-odd-pw-7"
LINK = re.compile(r"http://testserver(/\S+)")


def links(message: Any) -> list[str]:
    return LINK.findall(message.body)


def sign_up(client: Client, email: str, password: str = PASSWORD) -> Any:
    return client.post("/signup/", {"email": email, "password": password})


def signed_up(email: str, mailoutbox: list[Any]) -> Client:
    """A person who signed up, confirmed the address and signed in."""
    client = Client()
    assert sign_up(client, email).status_code == 200
    (verify,) = links(mailoutbox[-1])
    assert client.get(verify).status_code == 302
    assert client.post("/login/", {"username": email, "password": PASSWORD}).status_code == 302
    return client


def test_sign_up_confirm_sign_in_and_create_a_tenant(mailoutbox):
    client = Client()
    response = sign_up(client, " Ada@Example.COM ")
    assert response.status_code == 200 and b"Check your mail" in response.content
    user = get_user_model().objects.get(username="ada@example.com")
    assert user.email == "ada@example.com" and not accounts.is_verified(user)
    (mail,) = mailoutbox
    assert mail.to == ["ada@example.com"] and "Confirm" in mail.subject
    (verify,) = links(mail)
    # Signed in before confirming: told to confirm, may not create a tenant.
    assert client.post("/login/", {"username": "ada@example.com", "password": PASSWORD})
    assert b"Confirm your e-mail address" in client.get("/").content
    refused = client.post("/tenants/new/", {"slug": "ada", "name": "Ada"})
    assert refused.status_code == 400 and b"verify your e-mail" in refused.content
    assert not Tenant.objects.filter(slug="ada").exists()
    # The link proves the address (and works once).
    assert client.get(verify).status_code == 302
    assert accounts.is_verified(user)
    assert client.get(verify).status_code == 400
    assert client.get("/").status_code == 200  # the no-tenant page, with "Create a tenant"
    response = client.post("/tenants/new/", {"slug": "ada", "name": "Ada's team"})
    assert response.status_code == 302 and response["Location"] == "/t/ada/get-started/"
    tenant = Tenant.objects.get(slug="ada")
    assert Membership.objects.get(tenant=tenant, user=user).role == Role.OWNER
    assert AuditEvent.objects.filter(tenant=tenant, action="tenant.create", actor=user.username)


def test_refused_sign_ups_leave_nothing_and_the_next_good_one_works(mailoutbox):
    client = Client()
    weak = sign_up(client, "bob@example.com", "12345678")
    assert weak.status_code == 400 and b"too common" in weak.content
    bad = sign_up(client, "not-an-address")
    assert bad.status_code == 400 and b"valid e-mail" in bad.content
    assert not get_user_model().objects.filter(email="bob@example.com").exists()
    assert mailoutbox == []
    assert sign_up(client, "bob@example.com").status_code == 200
    assert len(mailoutbox) == 1


def test_a_taken_address_gets_the_same_answer_and_its_owner_a_mail(mailoutbox):
    signed_up("cy@example.com", mailoutbox)
    again = sign_up(Client(), "CY@example.com", "another-Pw-99x")
    assert again.status_code == 200 and b"Check your mail" in again.content
    assert get_user_model().objects.filter(email__iexact="cy@example.com").count() == 1
    assert "already have" in mailoutbox[-1].subject
    assert links(mailoutbox[-1]) == ["/password-reset/"]
    # The old password still signs in; the new one does not.
    assert Client().login(username="cy@example.com", password=PASSWORD)
    assert not Client().login(username="cy@example.com", password="another-Pw-99x")


def test_a_tampered_or_foreign_link_proves_nothing(mailoutbox):
    sign_up(Client(), "dee@example.com")
    (verify,) = links(mailoutbox[-1])
    user = get_user_model().objects.get(username="dee@example.com")
    assert Client().get(verify[:-3] + "abc/").status_code == 400
    assert Client().get("/verify/zz/abc-def/").status_code == 400
    assert not accounts.is_verified(user)
    # A new link (asked for while signed in) works; the old one still does until used.
    client = Client()
    client.force_login(user)
    assert client.post("/verify/resend/").status_code == 302
    (fresh,) = links(mailoutbox[-1])
    assert client.get(fresh).status_code == 302 and accounts.is_verified(user)
    assert Client().get(verify).status_code == 400  # proven: the old link is spent too


def test_a_person_owns_a_limited_number_of_tenants(settings, mailoutbox):
    settings.MILLRACE_SIGNUP_MAX_TENANTS = 1
    client = signed_up("eve@example.com", mailoutbox)
    assert client.post("/tenants/new/", {"slug": "eve", "name": "Eve"}).status_code == 302
    refused = client.post("/tenants/new/", {"slug": "eve-2", "name": "Eve 2"})
    assert refused.status_code == 400 and b"already own 1 tenant" in refused.content
    taken = signed_up("fay@example.com", mailoutbox).post(
        "/tenants/new/", {"slug": "eve", "name": "Not Eve"}
    )
    assert taken.status_code == 400 and b"already exists" in taken.content


def test_sign_up_can_be_turned_off(settings):
    settings.MILLRACE_SIGNUP_ENABLED = False
    assert b"turned off" in Client().get("/signup/").content
    assert sign_up(Client(), "gil@example.com").status_code == 400
    assert not get_user_model().objects.filter(email="gil@example.com").exists()


def test_an_unproven_address_is_nobodys_when_admins_add_members(owner, tenant_a, mailoutbox):
    sign_up(Client(), "squat@example.com")  # never confirmed
    admin = Client()
    admin.force_login(owner)
    for name in ("squat@example.com",):
        admin.post(f"/t/{tenant_a.slug}/members/add/", {"username": name, "role": "viewer"})
    assert not Membership.objects.filter(tenant=tenant_a, user__username="squat@example.com")


# --- invitations ------------------------------------------------------------------------------


def invite(client: Client, tenant: Tenant, email: str, role: str = "developer") -> Any:
    return client.post(f"/t/{tenant.slug}/invitations/", {"email": email, "role": role})


def test_an_invitation_is_accepted_once_by_its_address_only(owner, tenant_a, mailoutbox):
    inviter = Client()
    inviter.force_login(owner)
    assert invite(inviter, tenant_a, "Hal@Example.com").status_code == 302
    (mail,) = mailoutbox
    assert mail.to == ["hal@example.com"] and tenant_a.name in mail.subject
    (link,) = links(mail)
    # Before signing in: the offer, and the way to sign up with the address.
    page = Client().get(link)
    assert page.status_code == 200 and b"Sign up with hal@example.com" in page.content
    # Another person may not take it.
    other = signed_up("ivy@example.com", mailoutbox)
    refused = other.post(link)
    assert refused.status_code == 409 and b"sent to hal@example.com" in refused.content
    assert not Membership.objects.filter(tenant=tenant_a, user__username="ivy@example.com")
    # The invitee signs up, confirms, and accepts.
    hal = signed_up("hal@example.com", mailoutbox)
    assert b"Accept" in hal.get("/").content  # listed on the no-tenant page too
    response = hal.post(link)
    assert response.status_code == 302 and response["Location"] == f"/t/{tenant_a.slug}/"
    member = Membership.objects.get(tenant=tenant_a, user__username="hal@example.com")
    assert member.role == Role.DEVELOPER
    used = hal.post(link)
    assert used.status_code == 409 and b"used already" in used.content
    actions = set(AuditEvent.objects.filter(tenant=tenant_a).values_list("action", flat=True))
    assert {"invitation.create", "invitation.accept", "member.add"} <= actions


def test_invitations_are_withdrawn_replaced_and_expire(owner, admin_user, tenant_a, mailoutbox):
    inviter = Client()
    inviter.force_login(owner)
    invite(inviter, tenant_a, "jo@example.com")
    (first,) = links(mailoutbox[-1])
    invite(inviter, tenant_a, "jo@example.com", "viewer")  # replaces the first
    (second,) = links(mailoutbox[-1])
    jo = signed_up("jo@example.com", mailoutbox)
    assert b"withdrawn" in jo.post(first).content
    pending = Invitation.objects.get(tenant=tenant_a, email="jo@example.com", revoked_at=None)
    assert inviter.post(f"/t/{tenant_a.slug}/invitations/{pending.pk}/revoke/").status_code == 302
    assert b"withdrawn" in jo.post(second).content
    invite(inviter, tenant_a, "jo@example.com")
    (third,) = links(mailoutbox[-1])
    Invitation.objects.filter(email="jo@example.com", revoked_at=None).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert b"expired" in jo.post(third).content
    assert not Membership.objects.filter(tenant=tenant_a, user__username="jo@example.com")
    # Admins invite up to admin, not owners; members below admin not at all.
    admin = Client()
    admin.force_login(admin_user)
    refused = invite(admin, tenant_a, "kim@example.com", "owner")
    assert refused.status_code == 400 and b"only owners" in refused.content
    assert invite(admin, tenant_a, "kim@example.com", "admin").status_code == 302


def test_an_invitation_that_cannot_be_mailed_is_not_kept(owner, tenant_a, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2
    inviter = Client()
    inviter.force_login(owner)
    response = invite(inviter, tenant_a, "lou@example.com")
    assert response.status_code == 400 and b"could not be sent" in response.content
    assert not Invitation.objects.filter(email="lou@example.com").exists()


# --- sign-in, lockout, password change and reset -------------------------------------------------


def test_wrong_passwords_lock_the_account_until_a_reset(settings, mailoutbox):
    settings.MILLRACE_LOGIN_LOCKOUT_FAILURES = 3
    signed_up("max@example.com", mailoutbox)
    for _ in range(3):
        wrong = Client().post("/login/", {"username": "max@example.com", "password": "nope"})
        assert wrong.status_code == 200
    locked = Client().post("/login/", {"username": "MAX@example.com", "password": PASSWORD})
    assert locked.status_code == 429 and b"Too many wrong passwords" in locked.content
    Client().post("/password-reset/", {"email": "max@example.com"})
    (reset,) = links(mailoutbox[-1])
    client = Client()
    form = client.get(reset, follow=True)
    new = "a-Different-pw-8"
    done = client.post(form.redirect_chain[-1][0], {"new_password1": new, "new_password2": new})
    assert done.status_code == 302
    assert (
        Client().post("/login/", {"username": "max@example.com", "password": new}).status_code
        == 302
    )


def test_changing_the_password_signs_out_every_other_session(mailoutbox):
    here = signed_up("ned@example.com", mailoutbox)
    there = Client()
    assert there.login(username="ned@example.com", password=PASSWORD)
    assert there.get("/account/").status_code == 200
    new = "a-Fresh-pw-for-ned-1"
    response = here.post(
        "/account/password/",
        {"old_password": PASSWORD, "new_password1": new, "new_password2": new},
    )
    assert response.status_code == 302
    assert here.get("/account/").status_code == 200  # this session goes on
    assert there.get("/account/").status_code == 302  # the other one is signed out


def test_the_development_mail_page(settings, client):
    from control_plane.accounts.mail import OUTBOX_BACKEND

    settings.EMAIL_BACKEND = OUTBOX_BACKEND
    settings.DEBUG = False
    assert client.get("/dev/mail/").status_code == 404
    settings.DEBUG = True
    sign_up(client, "ola@example.com")
    page = client.get("/dev/mail/")
    assert page.status_code == 200 and b"ola@example.com" in page.content
    assert b"/verify/" in page.content


# --- the REST API ------------------------------------------------------------------------------


def test_invitations_over_rest_for_each_role(
    owner, admin_user, developer, viewer, outsider, tenant_a, make_key, mailoutbox
):
    url = f"/api/v1/tenants/{tenant_a.slug}/invitations/"
    body = {"email": "pat@example.com", "role": "viewer"}
    for user in (developer, viewer):
        assert session_client(user).post(url, body, format="json").status_code == 403
        assert session_client(user).get(url).status_code == 403
    assert session_client(outsider).get(url).status_code == 404
    assert session_client(outsider).post(url, body, format="json").status_code == 404
    keyed, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "all")])
    assert keyed.get(url).status_code == 403
    assert keyed.post(url, body, format="json").status_code == 403
    created = session_client(admin_user).post(url, body, format="json")
    assert created.status_code == 201, created.content
    data = created.json()
    assert data["status"] == "pending" and data["invited_by"] == admin_user.username
    assert "token" not in data and "token_hash" not in data
    assert [i["email"] for i in session_client(owner).get(url).json()["results"]] == [
        "pat@example.com"
    ]
    (link,) = links(mailoutbox[-1])
    token = link.rstrip("/").rsplit("/", 1)[1]
    pat = signed_up("pat@example.com", mailoutbox)
    joined = pat.post(
        "/api/v1/invitations/accept/", {"token": token}, content_type="application/json"
    )
    assert joined.status_code == 201 and joined.json()["role"] == "viewer"
    again = pat.post(
        "/api/v1/invitations/accept/", {"token": token}, content_type="application/json"
    )
    assert again.status_code == 409
    withdrawn = session_client(owner).delete(f"{url}{data['id']}/")
    assert withdrawn.status_code == 409  # accepted: nothing to withdraw


def test_a_verified_person_creates_a_tenant_over_rest(mailoutbox):
    pat = signed_up("quin@example.com", mailoutbox)
    body = {"slug": "quin", "name": "Quin"}
    limits = pat.post(
        "/api/v1/tenants/", {**body, "max_partitions": 9}, content_type="application/json"
    )
    assert limits.status_code == 403 and not Tenant.objects.filter(slug="quin").exists()
    made = pat.post("/api/v1/tenants/", body, content_type="application/json")
    assert made.status_code == 201 and made.json()["role"] == "owner"
    unverified = Client()
    sign_up(unverified, "ray@example.com")
    unverified.login(username="ray@example.com", password=PASSWORD)
    refused = unverified.post(
        "/api/v1/tenants/", {"slug": "ray", "name": "Ray"}, content_type="application/json"
    )
    assert refused.status_code == 403 and not Tenant.objects.filter(slug="ray").exists()
    assert Account.objects.filter(user__username="ray@example.com", email_verified_at=None)
