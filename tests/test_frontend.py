"""The console shell: sign-in, tenant navigation, the topic list, and tenant isolation."""

from __future__ import annotations

from django.test import Client

from control_plane.catalog import services as catalog_services
from tests.conftest import SYSTEM


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_login_page_and_redirect_to_first_tenant(owner):
    anonymous = Client()
    assert anonymous.get("/").status_code == 302
    assert "Sign in" in anonymous.get("/login/").content.decode()
    response = anonymous.post("/login/", {"username": "olivia", "password": "olivia-pw-123!"})
    assert response.status_code == 302
    assert anonymous.get("/").url == "/t/acme/"


def test_bad_login_stays_on_page(owner):
    response = Client().post("/login/", {"username": "olivia", "password": "wrong"})
    assert response.status_code == 200
    assert "did not match" in response.content.decode()


def test_topic_list_shows_only_this_tenant(owner, tenant_a, tenant_b, outsider):
    catalog_services.create_topic(
        SYSTEM, tenant_a, name="orders", partition_count=3, configs={"retention.ms": 86_400_000}
    )
    catalog_services.create_topic(SYSTEM, tenant_b, name="secret-plans", partition_count=1)
    page = signed_in(owner).get("/t/acme/topics/").content.decode()
    assert "orders" in page and "1 d" in page
    assert "secret-plans" not in page and "Globex" not in page
    assert signed_in(owner).get("/t/globex/topics/").status_code == 404
    assert "No topic matches" in signed_in(owner).get("/t/acme/topics/?q=zzz").content.decode()


def test_user_without_tenant_gets_a_clear_page(db):
    from tests.conftest import make_user

    page = signed_in(make_user("lonely")).get("/").content.decode()
    assert "not in a tenant yet" in page
