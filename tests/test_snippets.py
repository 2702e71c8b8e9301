"""Client settings in the console (frontend/snippets.py): the brokers' own addresses, the
listener's security protocol, and secrets only where the page may show them."""

from __future__ import annotations

from django.test import Client

from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Broker
from control_plane.core.actor import Actor


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_topic_page_names_the_plain_listeners_and_no_secret(owner, tenant_a):
    for broker_id in (1, 2):
        Broker.objects.create(id=broker_id, host=f"10.0.0.{broker_id}", port=9092)
    catalog_services.create_topic(Actor(user=owner), tenant_a, name="orders", partition_count=1)
    page = signed_in(owner).get("/t/acme/topics/orders/").content.decode()
    assert "10.0.0.1:9092,10.0.0.2:9092" in page
    assert "security.protocol=SASL_PLAINTEXT" in page
    assert "&lt;API key id&gt;" in page and "&lt;API secret&gt;" in page
    assert "/api/v1/tenants/acme/topics/orders/records/" in page
    assert "ws://testserver/ws/v1/tenants/acme/stream" in page
    assert "ssl.ca.location" not in page


def test_with_a_tls_listener_clients_are_sent_to_it(owner, tenant_a):
    Broker.objects.create(
        id=1, host="10.0.0.1", port=9092, tls_host="kafka.example.com", tls_port=9093
    )
    catalog_services.create_topic(Actor(user=owner), tenant_a, name="orders", partition_count=1)
    page = signed_in(owner).get("/t/acme/topics/orders/", secure=True).content.decode()
    assert "kafka.example.com:9093" in page and "security.protocol=SASL_SSL" in page
    assert "ssl.ca.location" in page
    assert "wss://testserver/ws/v1/tenants/acme/stream" in page
    # The Spark source has no TLS option: it is given the plain listener.
    assert ".option(&quot;bootstrap.servers&quot;, &quot;10.0.0.1:9092&quot;)" in page


def test_a_new_keys_page_fills_in_the_key_and_only_there(owner, tenant_a):
    Broker.objects.create(id=1, host="127.0.0.1", port=9092)
    client = signed_in(owner)
    client.post("/t/acme/create-service-account/", {"name": "app"})
    created = client.post("/t/acme/create-api-key/", {"service_account": "app"})
    page = created.content.decode()
    assert created["Cache-Control"] == "no-store"
    secret = page.split('id="api-key-secret" value="')[1].split('"')[0]
    assert secret.startswith("mrsec_")
    assert page.count(secret) >= 6  # the field, kcat, Python, Java, Spark, REST, WebSocket
    assert "&lt;API secret&gt;" not in page
    listing = client.get("/t/acme/api-keys/").content.decode()
    assert secret not in listing
