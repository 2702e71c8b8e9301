"""Alerts: a consumer lag rule fires once, after its duration, with one webhook whose
signature is valid (checked by a real HTTP receiver on loopback) and an e-mail, then
resolves once; a receiver that is down is tried again with back-off until the delivery is
marked failed, which the API and the console show. Also the other kinds, the checks on
rules, and who may do what."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from control_plane.access import services as access_services
from control_plane.alerts import services as alerts
from control_plane.alerts.models import AlertState, Delivery, Notification
from control_plane.catalog import services as catalog_services
from control_plane.core.actor import Actor
from control_plane.core.errors import InvalidInput
from control_plane.groups.models import ConsumerGroup, LagSample
from tests.broker.conftest import free_port
from tests.conftest import SYSTEM, session_client

T = "/api/v1/tenants/acme"


class Receiver:
    """A webhook receiver on loopback: records each request; answers ``status``."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.status = 204
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((dict(self.headers), body))
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/millrace"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def lag(group: ConsumerGroup, topic, at, records: int, seconds: float) -> None:
    for partition in (0, 1):
        LagSample.objects.create(
            group=group,
            topic=topic,
            partition=partition,
            at=at,
            log_end_offset=10_000,
            lag=records // 2,
            lag_seconds=seconds,
        )


def deliver_due() -> list[str | None]:
    return [alerts.deliver(pk) for pk in alerts.due_deliveries()]


def test_lag_fires_one_signed_webhook_after_its_duration_and_resolves_once(
    tenant_a, receiver, settings
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    topic = catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=2)
    group = ConsumerGroup.objects.create(tenant=tenant_a, group_id="billing")
    created = alerts.create_rule(
        SYSTEM,
        tenant_a,
        {
            "name": "billing behind",
            "kind": "consumer_lag",
            "group": "billing",
            "measure": "records",
            "threshold": 100,
            "for_seconds": 60,
            "emails": ["ops@example.com"],
            "webhook_url": receiver.url,
        },
    )
    secret = created.webhook_secret
    assert len(secret) == 64
    t0 = timezone.now()
    lag(group, topic, t0, 500, 42.0)
    assert alerts.evaluate(t0).fired == 0  # breaching, not yet for 60 s
    assert alerts.evaluate(t0 + timedelta(seconds=30)).fired == 0
    state = AlertState.objects.get(rule=created.rule, subject="billing")
    assert state.breaching_since == t0 and not state.firing and state.value == 500
    assert alerts.evaluate(t0 + timedelta(seconds=61)).fired == 1
    assert alerts.evaluate(t0 + timedelta(seconds=90)).fired == 0  # fires once
    # No lag sample for ten minutes: it cannot be told, so it does not resolve.
    assert alerts.evaluate(t0 + timedelta(seconds=1000)).resolved == 0
    assert AlertState.objects.get(rule=created.rule, subject="billing").firing
    assert deliver_due() == ["delivered", "delivered"]
    assert deliver_due() == []
    ((headers, body),) = receiver.requests
    payload = json.loads(body)
    assert payload["event"] == "firing" and payload["subject"] == "billing"
    assert payload["value"] == 500 and payload["threshold"] == 100
    assert payload["tenant"] == "acme" and payload["rule"]["name"] == "billing behind"
    assert headers["Millrace-Event"] == "alert.firing"
    # The signature, as a receiver checks it: HMAC-SHA256 of "<t>.<body>" with the secret.
    fields = dict(part.split("=", 1) for part in headers["Millrace-Signature"].split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + body, hashlib.sha256)
    assert hmac.compare_digest(fields["v1"], expected.hexdigest())
    assert alerts.verify(secret, headers["Millrace-Signature"], body)
    assert not alerts.verify("another secret", headers["Millrace-Signature"], body)
    assert not alerts.verify(secret, headers["Millrace-Signature"], body + b" ")
    (message,) = mail.outbox
    assert message.to == ["ops@example.com"] and "FIRING" in message.subject
    # The lag comes down: it resolves, once.
    t1 = t0 + timedelta(seconds=120)
    lag(group, topic, t1, 10, 1.0)
    assert alerts.evaluate(t1).resolved == 1
    assert alerts.evaluate(t1 + timedelta(seconds=30)).resolved == 0
    deliver_due()
    assert [json.loads(b)["event"] for _, b in receiver.requests] == ["firing", "resolved"]
    events = Notification.objects.filter(rule=created.rule).values_list("event", flat=True)
    assert sorted(events) == ["firing", "resolved"]


def test_a_receiver_that_is_down_is_retried_with_back_off_then_the_failure_is_shown(
    tenant_a, admin_user, settings
):
    settings.MILLRACE_ALERT_DELIVERY_ATTEMPTS = 3
    settings.MILLRACE_ALERT_RETRY_SECONDS = 10
    down = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    created = alerts.create_rule(
        Actor(user=admin_user),
        tenant_a,
        {"name": "keys", "kind": "key_expiring", "threshold": 7, "webhook_url": down},
    )
    sa = access_services.create_service_account(SYSTEM, tenant_a, name="app")
    expires = timezone.now() + timedelta(days=2)
    key = access_services.create_api_key(SYSTEM, sa, expires_at=expires).api_key
    now = timezone.now()
    assert alerts.evaluate(now).fired == 1
    (delivery,) = Delivery.objects.filter(notification__rule=created.rule)
    waits = []
    for attempt in (1, 2, 3):
        assert alerts.deliver(delivery.pk) == ("failed" if attempt == 3 else "pending")
        delivery.refresh_from_db()
        assert delivery.attempts == attempt and "could not be reached" in delivery.last_error
        if attempt < 3:
            waits.append(round((delivery.next_attempt_at - timezone.now()).total_seconds()))
            assert alerts.deliver(delivery.pk) is None  # not due yet
            Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
    assert waits[0] in (9, 10) and waits[1] in (19, 20)  # doubled
    assert delivery.state == "failed" and delivery.next_attempt_at is None
    assert alerts.due_deliveries() == []
    # Shown in the API's delivery log and on the rule's console page.
    log = session_client(admin_user).get(f"{T}/alert-rules/{created.rule.pk}/deliveries/").json()
    assert log[0]["state"] == "failed" and log[0]["attempts"] == 3
    assert log[0]["subject"] == key.key_id and log[0]["event"] == "firing"
    console = Client()
    console.force_login(admin_user)
    page = console.get(f"/t/acme/alerts/{created.rule.pk}/").content.decode()
    assert "failed" in page and "could not be reached" in page


def test_a_receiver_answering_an_error_is_retried(tenant_a, receiver):
    receiver.status = 500
    created = alerts.create_rule(
        SYSTEM,
        tenant_a,
        {
            "name": "parts",
            "kind": "usage",
            "limit": "partitions",
            "threshold": 50,
            "webhook_url": receiver.url,
        },
    )
    catalog_services.create_topic(SYSTEM, tenant_a, name="big", partition_count=600)
    assert alerts.evaluate().fired == 1  # 600 of 1,000 partitions: 60 %
    (delivery,) = Delivery.objects.filter(notification__rule=created.rule)
    assert alerts.deliver(delivery.pk) == "pending"
    delivery.refresh_from_db()
    assert delivery.last_status == 500 and "HTTP 500" in delivery.last_error
    receiver.status = 200
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())
    assert alerts.deliver(delivery.pk) == "delivered"
    assert len(receiver.requests) == 2


def test_a_failed_connector_or_task_fires_and_an_unreadable_cluster_changes_nothing(tenant_a):
    created = alerts.create_rule(
        SYSTEM,
        tenant_a,
        {
            "name": "sinks",
            "kind": "connector_failed",
            "emails": ["ops@example.com"],
            "threshold": 0,
        },
    )
    states = {"pg-out": "RUNNING", "pg-out/0": "RUNNING", "pg-out/1": "FAILED"}
    with mock.patch.object(alerts.connect_services, "connector_states", return_value=states):
        assert alerts.evaluate().fired == 1
    firing = AlertState.objects.filter(rule=created.rule, firing=True)
    assert [s.subject for s in firing] == ["pg-out/1"]
    error = alerts.connect_services.ConnectError(500, "brokers unreachable")
    with mock.patch.object(alerts.connect_services, "connector_states", side_effect=error):
        assert alerts.evaluate().resolved == 0  # cannot tell: nothing resolves
    states["pg-out/1"] = "RUNNING"
    with mock.patch.object(alerts.connect_services, "connector_states", return_value=states):
        assert alerts.evaluate().resolved == 1


def test_rules_are_checked(tenant_a, settings):
    base = {"name": "r", "kind": "consumer_lag", "threshold": 10, "emails": ["a@example.com"]}
    for change, field in (
        ({"kind": "weather"}, "kind"),
        ({"threshold": -1}, "threshold"),
        ({"emails": ["not-an-address"]}, "emails"),
        ({"emails": []}, "emails"),  # no channel at all
        ({"webhook_url": "ftp://example.com/x"}, "webhook_url"),
        ({"measure": "bytes"}, "measure"),
        ({"kind": "usage", "limit": "storage", "threshold": 150}, "threshold"),
        ({"for_seconds": -5}, "for_seconds"),
    ):
        with pytest.raises(InvalidInput) as err:
            alerts.create_rule(SYSTEM, tenant_a, {**base, **change})
        assert err.value.field == field, change
    # In production a webhook may not point into the deployment's own network.
    settings.MILLRACE_ALERT_WEBHOOK_PRIVATE = False
    for url in ("http://127.0.0.1:9/x", "http://10.0.0.5/x", "http://localhost/x"):
        with pytest.raises(InvalidInput, match="private or local"):
            alerts.create_rule(SYSTEM, tenant_a, {**base, "webhook_url": url})


def test_who_may_read_and_change_rules(tenant_a, viewer, developer, admin_user, outsider):
    body = {"name": "lag", "kind": "consumer_lag", "threshold": 5, "emails": ["a@example.com"]}
    for user in (viewer, developer):
        assert (
            session_client(user).post(f"{T}/alert-rules/", body, format="json").status_code == 403
        )
    made = session_client(admin_user).post(f"{T}/alert-rules/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["webhook_secret"] is None  # no webhook, no secret
    rule = made.json()["id"]
    listed = session_client(viewer).get(f"{T}/alert-rules/").json()["results"]
    assert [r["name"] for r in listed] == ["lag"] and "webhook_secret" in listed[0]
    assert listed[0]["webhook_secret"] is None
    assert session_client(outsider).get(f"{T}/alert-rules/{rule}/").status_code == 404
    changed = session_client(admin_user).patch(
        f"{T}/alert-rules/{rule}/", {"threshold": 50, "enabled": False}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["threshold"] == 50
    assert changed.json()["enabled"] is False
    with_hook = (
        session_client(admin_user)
        .post(
            f"{T}/alert-rules/",
            {**body, "name": "hooked", "webhook_url": "http://127.0.0.1:9/x"},
            format="json",
        )
        .json()
    )
    assert len(with_hook["webhook_secret"]) == 64  # shown in this answer only
    again = session_client(admin_user).get(f"{T}/alert-rules/{with_hook['id']}/").json()
    assert again["webhook_secret"] is None
    assert session_client(viewer).delete(f"{T}/alert-rules/{rule}/").status_code == 403
    assert session_client(admin_user).delete(f"{T}/alert-rules/{rule}/").status_code == 204


def test_the_console_alerts_page(tenant_a, admin_user, viewer):
    page = Client()
    page.force_login(viewer)
    assert page.get("/t/acme/alerts/").status_code == 200
    assert page.post("/t/acme/alerts/", {"name": "x"}).status_code == 403
    admin = Client()
    admin.force_login(admin_user)
    bad = admin.post("/t/acme/alerts/", {"name": "lag", "kind": "consumer_lag", "threshold": "5"})
    assert bad.status_code == 400 and b"at least one e-mail address" in bad.content
    made = admin.post(
        "/t/acme/alerts/",
        {
            "name": "lag",
            "kind": "consumer_lag",
            "measure": "seconds",
            "threshold": "30",
            "for_seconds": "120",
            "emails": "ops@example.com, dev@example.com",
            "webhook_url": "http://127.0.0.1:9/hook",
        },
    )
    assert made.status_code == 201 and b"webhook-secret" in made.content
    listing = admin.get("/t/acme/alerts/").content.decode()
    assert "lag" in listing and "ops@example.com, dev@example.com" in listing
