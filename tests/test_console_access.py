"""Console access pages (Django's test client): service accounts, API keys with their
show-once secret, ACLs, the ACL checker, roles (changes need admin) and tenant isolation.
"""

from __future__ import annotations

import html
import logging
import re

import pytest
from django.test import Client
from django.utils import timezone

from control_plane.access import services as access_services
from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.audit.models import AuditEvent
from tests.conftest import SYSTEM


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def acl_form(**overrides):
    form = {
        "principal": "User:app",
        "resource_type": "topic",
        "pattern_type": "prefixed",
        "resource_name": "orders-",
        "operation": "read",
        "permission": "allow",
        "host": "*",
    }
    form.update(overrides)
    return form


def add_acl(tenant, **overrides):
    return access_services.create_acl(SYSTEM, tenant, **acl_form(**overrides))


def secret_on(page: str) -> str:
    match = re.search(r'id="api-key-secret" value="([^"]+)"', page)
    assert match, "the created-key page shows the secret in its field"
    return html.unescape(match.group(1))


def check(client: Client, **question) -> str:
    """The ACL checker's answer, as htmx gets it (the partial alone)."""
    response = client.get("/t/acme/acl-check/", question, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body
    return body


@pytest.fixture
def app_account(tenant_a):
    return access_services.create_service_account(SYSTEM, tenant_a, name="app")


# --- roles -------------------------------------------------------------------------------


@pytest.mark.parametrize("member", ["viewer", "developer"])
def test_below_admin_sees_lists_but_cannot_change_anything(request, member, tenant_a, app_account):
    user = request.getfixturevalue(member)
    key = access_services.create_api_key(SYSTEM, app_account, description="prod").api_key
    acl = add_acl(tenant_a)
    client = signed_in(user)

    accounts = client.get("/t/acme/service-accounts/").content.decode()
    assert "User:app" in accounts and "ACL checker" in accounts
    keys = client.get("/t/acme/api-keys/").content.decode()
    assert key.key_id in keys and "prod" in keys
    acls = client.get("/t/acme/acls/").content.decode()
    assert "orders-" in acls and "Deny wins" in acls
    for page in (accounts, keys, acls):
        for control in ("/create-service-account/", "/create-api-key/", "/create-acl/"):
            assert control not in page
        assert "/delete/" not in page and "/revoke/" not in page

    refused = [
        ("get", "/t/acme/create-service-account/", {}),
        ("post", "/t/acme/create-service-account/", {"name": "sneaky"}),
        ("post", "/t/acme/service-accounts/app/delete/", {}),
        ("get", "/t/acme/create-api-key/", {}),
        ("post", "/t/acme/create-api-key/", {"service_account": "app"}),
        ("get", f"/t/acme/api-keys/{key.key_id}/revoke/", {}),
        ("post", f"/t/acme/api-keys/{key.key_id}/revoke/", {}),
        ("get", "/t/acme/create-acl/", {}),
        ("post", "/t/acme/create-acl/", acl_form(resource_name="x")),
        ("post", f"/t/acme/acls/{acl.pk}/delete/", {}),
    ]
    for method, url, data in refused:
        assert getattr(client, method)(url, data).status_code == 403, url
    assert list(ServiceAccount.objects.values_list("name", flat=True)) == ["app"]
    assert ApiKey.objects.get().state == "active" and ApiKey.objects.count() == 1
    assert list(Acl.objects.all()) == [acl]


def test_admin_sees_the_controls(admin_user, tenant_a, app_account):
    access_services.create_api_key(SYSTEM, app_account)
    add_acl(tenant_a)
    client = signed_in(admin_user)
    assert "Create service account" in client.get("/t/acme/service-accounts/").content.decode()
    keys = client.get("/t/acme/api-keys/").content.decode()
    assert "Create API key" in keys and "/revoke/" in keys
    acls = client.get("/t/acme/acls/").content.decode()
    assert "Create ACL" in acls and "/delete/" in acls


# --- service accounts and API keys ------------------------------------------------------


def test_admin_creates_an_account_and_a_key_whose_secret_is_shown_once(
    admin_user, tenant_a, caplog
):
    client = signed_in(admin_user)
    response = client.post(
        "/t/acme/create-service-account/", {"name": "billing", "description": "Billing app"}
    )
    assert response.status_code == 302 and response.url == "/t/acme/service-accounts/"
    listing = client.get(response.url).content.decode()
    assert "User:billing" in listing and "Billing app" in listing
    assert 'aria-label="0 active API keys of billing"' in listing

    with caplog.at_level(logging.DEBUG):
        response = client.post(
            "/t/acme/create-api-key/",
            {"service_account": "billing", "description": "prod", "expires_in_days": "30"},
        )
    assert response.status_code == 200  # rendered in place: no redirect can carry it
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    secret = secret_on(page)
    # In the secret's field, and in the client settings beside it; nowhere else.
    before, _, rest = page.partition('id="connect"')
    assert before.count(secret) == 1 and rest.count(secret) >= 6
    assert 'id="copy-secret"' in page and 'aria-live="polite"' in page
    assert "navigator.clipboard" in page

    key = ApiKey.objects.get()
    assert key.key_id in page and key.service_account.name == "billing"
    assert key.description == "prod" and key.created_by == admin_user
    days = (key.expires_at - timezone.now()).total_seconds() / 86_400
    assert 29.9 < days <= 30
    # Stored nowhere: not in the key's row, the audit trail, the logs or the session.
    assert secret not in str(list(ApiKey.objects.values()))
    assert secret not in str(list(AuditEvent.objects.values()))
    assert secret not in caplog.text
    assert secret not in str(dict(client.session))
    assert access_services.authenticate_api_key(key.key_id, secret) == key

    keys = client.get("/t/acme/api-keys/").content.decode()
    assert secret not in keys
    assert key.key_id in keys and "prod" in keys and "adam" in keys and "active" in keys
    assert ">never<" not in keys  # expires in 30 days, and the key has just been used
    listing = client.get("/t/acme/service-accounts/").content.decode()
    assert 'aria-label="1 active API keys of billing"' in listing

    confirm = client.get(f"/t/acme/api-keys/{key.key_id}/revoke/").content.decode()
    assert "Revoke API key" in confirm and secret not in confirm
    response = client.post(f"/t/acme/api-keys/{key.key_id}/revoke/")
    assert response.status_code == 302 and response.url == "/t/acme/api-keys/"
    key.refresh_from_db()
    assert key.state == "revoked"
    with pytest.raises(access_services.KeyRejected, match="revoked"):
        access_services.authenticate_api_key(key.key_id, secret)
    keys = client.get("/t/acme/api-keys/").content.decode()
    assert "revoked" in keys and f"/api-keys/{key.key_id}/revoke/" not in keys
    assert secret not in keys


def test_key_list_filters_and_shows_last_use(admin_user, tenant_a, app_account):
    other = access_services.create_service_account(SYSTEM, tenant_a, name="other")
    used = access_services.create_api_key(SYSTEM, app_account, description="used")
    access_services.create_api_key(SYSTEM, other, description="idle")
    access_services.authenticate_api_key(used.api_key.key_id, used.secret)
    client = signed_in(admin_user)
    rows = client.get(
        "/t/acme/api-keys/", {"service_account": "app"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "<html" not in rows and "used" in rows and "idle" not in rows
    assert timezone.now().strftime("%Y-%m-%d") in rows  # last used today
    rows = client.get("/t/acme/api-keys/", {"state": "revoked"}).content.decode()
    assert "No API key matches" in rows


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ({"name": "bad name!"}, "name", "name must be 1-64"),
        ({"name": ""}, "name", "name must be 1-64"),
        ({"name": "app"}, "name", "already exists"),
    ],
)
def test_invalid_service_account_shows_the_message_at_its_field(
    admin_user, app_account, form, field, message
):
    response = signed_in(admin_user).post("/t/acme/create-service-account/", form)
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page and f'id="{field}-error"' in page
    assert list(ServiceAccount.objects.values_list("name", flat=True)) == ["app"]


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ({"service_account": ""}, "service_account", "choose a service account"),
        ({"service_account": "ghost"}, "service_account", "choose a service account"),
        ({"expires_in_days": "0"}, "expires_in_days", "from 1 to"),
        ({"expires_in_days": "soon"}, "expires_in_days", "whole number"),
        ({"expires_in_days": "99999999999"}, "expires_in_days", "from 1 to"),
        ({"description": "x" * 201}, "description", "at most 200"),
    ],
)
def test_invalid_key_shows_the_message_and_creates_nothing(
    admin_user, app_account, form, field, message
):
    data = {"service_account": "app", "description": "", "expires_in_days": "", **form}
    response = signed_in(admin_user).post("/t/acme/create-api-key/", data)
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page and f'id="{field}-error"' in page
    assert 'id="api-key-secret"' not in page
    assert not ApiKey.objects.exists()


def test_deleting_an_account_asks_first_and_takes_its_keys_and_acls(
    admin_user, tenant_a, app_account
):
    access_services.create_api_key(SYSTEM, app_account)
    add_acl(tenant_a)
    client = signed_in(admin_user)
    confirm = client.get("/t/acme/service-accounts/app/delete/").content.decode()
    assert "Delete service account app?" in confirm
    assert "1 active API key(s)" in confirm and "1 ACL(s)" in confirm
    assert ServiceAccount.objects.exists()
    response = client.post("/t/acme/service-accounts/app/delete/")
    assert response.status_code == 302 and response.url == "/t/acme/service-accounts/"
    assert not ServiceAccount.objects.exists()
    assert not ApiKey.objects.exists() and not Acl.objects.exists()
    assert "Service account app deleted" in client.get(response.url).content.decode()


# --- ACLs ----------------------------------------------------------------------------------


def test_admin_creates_filters_and_deletes_acls(admin_user, tenant_a, app_account):
    client = signed_in(admin_user)
    page = client.get("/t/acme/create-acl/?principal=User:app").content.decode()
    assert '<option value="User:app" selected>' in page and 'value="User:*"' in page
    response = client.post("/t/acme/create-acl/", acl_form())
    assert response.status_code == 302 and response.url == "/t/acme/acls/"
    client.post("/t/acme/create-acl/", acl_form(principal="User:*", resource_type="group"))
    acl = Acl.objects.get(service_account=app_account)
    assert (acl.pattern_type, acl.resource_name, acl.operation, acl.host) == (
        "prefixed",
        "orders-",
        "read",
        "*",
    )
    assert AuditEvent.objects.filter(action="acl.create", actor_user=admin_user).count() == 2

    rows = client.get(
        "/t/acme/acls/", {"principal": "User:*"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "<html" not in rows and "group" in rows and "User:app" not in rows
    rows = client.get("/t/acme/acls/", {"resource_type": "topic"}).content.decode()
    assert "<html" in rows and "orders-" in rows and "<td>group</td>" not in rows
    rows = client.get("/t/acme/acls/", {"resource_type": "cluster"}).content.decode()
    assert "No ACL matches" in rows

    assert "Delete this ACL?" in client.get(f"/t/acme/acls/{acl.pk}/delete/").content.decode()
    response = client.post(f"/t/acme/acls/{acl.pk}/delete/")
    assert response.status_code == 302 and response.url == "/t/acme/acls/"
    assert not Acl.objects.filter(pk=acl.pk).exists() and Acl.objects.count() == 1


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"principal": "User:ghost"}, "principal", "no service account named"),
        ({"principal": ""}, "principal", "principal must be"),
        ({"resource_type": "table"}, "resource_type", "resource_type must be one of"),
        ({"pattern_type": "regex"}, "pattern_type", "pattern_type must be one of"),
        ({"operation": "fly"}, "operation", "operation must be one of"),
        ({"permission": "maybe"}, "permission", "permission must be one of"),
        ({"resource_name": ""}, "resource_name", "must not be empty"),
        ({"resource_name": "x" * 256}, "resource_name", "at most 255"),
        (
            {"resource_type": "cluster", "operation": "describe", "resource_name": "x"},
            "resource_name",
            "cluster ACLs use the literal resource name",
        ),
        ({"resource_type": "group", "operation": "write"}, "operation", "does not apply"),
        ({"host": "not-an-ip"}, "host", "one IP address"),
    ],
)
def test_invalid_acl_shows_the_message_at_its_field_and_creates_nothing(
    admin_user, app_account, overrides, field, message
):
    response = signed_in(admin_user).post("/t/acme/create-acl/", acl_form(**overrides))
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert message in page and f'id="{field}-error"' in page
    assert not Acl.objects.exists()


def test_duplicate_acl_is_reported_on_the_form(admin_user, tenant_a, app_account):
    add_acl(tenant_a)
    response = signed_in(admin_user).post("/t/acme/create-acl/", acl_form())
    assert response.status_code == 400
    assert "an identical ACL already exists" in response.content.decode()
    assert Acl.objects.count() == 1


# --- ACL checker ------------------------------------------------------------------------


def test_checker_names_the_rule_that_decided(viewer, tenant_a, app_account):
    add_acl(tenant_a)  # allow read on topics prefixed orders-
    add_acl(
        tenant_a,
        principal="User:*",
        resource_name="orders-secret",
        pattern_type="literal",
        permission="deny",
        operation="all",
    )
    add_acl(
        tenant_a, resource_name="audit", pattern_type="literal", operation="write", host="10.0.0.7"
    )
    client = signed_in(viewer)
    question = {"principal": "User:app", "resource_type": "topic", "host": ""}

    answer = check(client, **question, operation="read", resource_name="orders-eu")
    assert "Allowed" in answer and "Denied" not in answer
    assert "Decided by this ACL" in answer
    assert ">prefixed<" in answer and ">orders-<" in answer and ">allow<" in answer

    answer = check(client, **question, operation="describe", resource_name="orders-eu")
    assert "Allowed" in answer and "an allow of read implies describe" in answer

    answer = check(client, **question, operation="read", resource_name="orders-secret")
    assert "Denied" in answer and ">deny<" in answer and ">User:*<" in answer
    assert "all covers every operation" in answer

    answer = check(client, **question, operation="read", resource_name="payments")
    assert "Denied" in answer and "No ACL matched: denied by default" in answer
    assert "Decided by" not in answer

    # Host-specific rules apply only to that host.
    answer = check(client, **question, operation="write", resource_name="audit")
    assert "No ACL matched: denied by default" in answer
    answer = check(
        client, **{**question, "host": "10.0.0.7"}, operation="write", resource_name="audit"
    )
    assert "Allowed" in answer and ">10.0.0.7<" in answer

    answer = check(client, principal="User:app", resource_type="cluster", operation="create")
    assert "Denied" in answer and "kafka-cluster" in answer


def test_checker_page_works_without_script_and_reports_bad_questions(viewer, app_account):
    client = signed_in(viewer)
    page = client.get("/t/acme/acl-check/").content.decode()
    assert "<html" in page and "Allowed" not in page and "Denied" not in page
    assert '<option value="all"' not in page  # a request names a concrete operation

    full = client.get(
        "/t/acme/acl-check/",
        {
            "principal": "User:app",
            "operation": "read",
            "resource_type": "topic",
            "resource_name": "orders",
        },
    )
    assert full.status_code == 200
    body = full.content.decode()
    assert "<html" in body and "No ACL matched: denied by default" in body
    assert '<option value="User:app" selected>' in body  # the question stays in the form

    bad = {"principal": "User:app", "operation": "read", "resource_type": "cluster"}
    full = client.get("/t/acme/acl-check/", bad)
    assert full.status_code == 400
    assert "read does not apply to cluster resources" in full.content.decode()
    assert 'id="operation-error"' in full.content.decode()
    answer = check(client, **bad)
    assert "read does not apply to cluster resources" in answer and "Denied" not in answer
    answer = check(
        client, principal="User:nobody", operation="read", resource_type="topic", resource_name="x"
    )
    assert "choose a service account" in answer


# --- tenant isolation ---------------------------------------------------------------------


def test_another_tenants_access_pages_and_objects_do_not_exist(owner, tenant_a, tenant_b):
    theirs = access_services.create_service_account(SYSTEM, tenant_b, name="secret-app")
    their_key = access_services.create_api_key(SYSTEM, theirs).api_key
    their_acl = add_acl(tenant_b, principal="User:secret-app")
    client = signed_in(owner)

    for url in (
        "/t/globex/service-accounts/",
        "/t/globex/create-service-account/",
        "/t/globex/service-accounts/secret-app/delete/",
        "/t/globex/api-keys/",
        "/t/globex/create-api-key/",
        f"/t/globex/api-keys/{their_key.key_id}/revoke/",
        "/t/globex/acls/",
        "/t/globex/create-acl/",
        f"/t/globex/acls/{their_acl.pk}/delete/",
        "/t/globex/acl-check/",
        # Their objects through our own tenant's URLs.
        "/t/acme/service-accounts/secret-app/delete/",
        f"/t/acme/api-keys/{their_key.key_id}/revoke/",
        f"/t/acme/acls/{their_acl.pk}/delete/",
    ):
        assert client.get(url).status_code == 404, url
        assert client.post(url, {"name": "x", "service_account": "secret-app"}).status_code == 404
    assert ServiceAccount.objects.filter(tenant=tenant_b).count() == 1
    assert ServiceAccount.objects.filter(tenant=tenant_a).count() == 0
    assert ApiKey.objects.get().state == "active" and Acl.objects.count() == 1

    for url in ("/t/acme/service-accounts/", "/t/acme/api-keys/", "/t/acme/acls/"):
        page = client.get(url).content.decode()
        assert "secret-app" not in page and their_key.key_id not in page
    response = client.post("/t/acme/create-api-key/", {"service_account": "secret-app"})
    assert response.status_code == 400 and ApiKey.objects.count() == 1
    response = client.post("/t/acme/create-acl/", acl_form(principal="User:secret-app"))
    assert response.status_code == 400 and Acl.objects.count() == 1
    answer = check(
        client,
        principal="User:secret-app",
        operation="read",
        resource_type="topic",
        resource_name="orders-x",
    )
    assert "choose a service account" in answer and "Allowed" not in answer
