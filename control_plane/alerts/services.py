"""Alert rules: making them, evaluating them, and delivering what fires (docs/alerts.md).

``evaluate`` (the beat, every MILLRACE_ALERT_EVALUATE_SECONDS) measures every enabled
rule's subjects and moves each subject's state under a row lock: a subject that has
breached for the rule's ``for_seconds`` *fires* once, and *resolves* once when it no
longer breaches (or is gone). Each of those is a notification with a delivery per
channel. ``deliver`` sends one delivery: an e-mail, or an HTTP POST of the notification
as JSON signed with the rule's secret (``Millrace-Signature: t=<unix>,v1=<hex>``, the
HMAC-SHA256 of ``<t>.<body>``); a failure is tried again with exponential back-off,
``MILLRACE_ALERT_DELIVERY_ATTEMPTS`` times in all, then marked failed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Max, Q, Sum
from django.utils import timezone

from control_plane.access.models import ApiKey
from control_plane.alerts.models import (
    AlertKind,
    AlertRule,
    AlertState,
    Delivery,
    DeliveryState,
    LagMeasure,
    Notification,
    UsageLimit,
)
from control_plane.audit.services import record_event
from control_plane.catalog.models import Topic, TopicSample
from control_plane.connect import services as connect_services
from control_plane.core.actor import Actor
from control_plane.core.errors import AlreadyExists, InvalidInput, ServiceError
from control_plane.groups.models import ConsumerGroup, LagSample
from control_plane.tenancy.models import Tenant
from control_plane.usage.models import UsageHour

logger = logging.getLogger("millrace.alerts")

SIGNATURE_HEADER = "Millrace-Signature"
MAX_EMAILS = 10
WEBHOOK_TIMEOUT_S = 10


# --- rules ----------------------------------------------------------------------------------


def rule_snapshot(rule: AlertRule) -> dict[str, Any]:
    return {
        "name": rule.name,
        "kind": rule.kind,
        "group": rule.group,
        "measure": rule.measure,
        "limit": rule.limit,
        "connector": rule.connector,
        "threshold": rule.threshold,
        "for_seconds": rule.for_seconds,
        "emails": rule.emails,
        "webhook_url": rule.webhook_url,
        "enabled": rule.enabled,
    }


def check_webhook_url(url: str) -> str:
    """An http(s) URL; unless MILLRACE_ALERT_WEBHOOK_PRIVATE, not one whose host is (or
    resolves to) a loopback, private, link-local or reserved address: a webhook must not
    be a way into the deployment's own network."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("an http:// or https:// URL", field="webhook_url")
    if len(url) > 500:
        raise InvalidInput("at most 500 characters", field="webhook_url")
    if not settings.MILLRACE_ALERT_WEBHOOK_PRIVATE:
        try:
            infos = socket.getaddrinfo(parts.hostname, parts.port or 443)
        except OSError:
            raise InvalidInput(
                f"the host {parts.hostname!r} does not resolve", field="webhook_url"
            ) from None
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_global:
                raise InvalidInput(
                    f"{parts.hostname} is a private or local address", field="webhook_url"
                )
    return url


def _check(fields: dict[str, Any]) -> dict[str, Any]:
    """The rule's fields, checked and normalized (InvalidInput naming the field)."""
    kind = fields.get("kind")
    if kind not in AlertKind.values:
        raise InvalidInput(f"one of {', '.join(AlertKind.values)}", field="kind")
    name = str(fields.get("name", "")).strip()
    if not name or len(name) > 100:
        raise InvalidInput("1 to 100 characters", field="name")
    threshold = fields.get("threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or threshold < 0:
        raise InvalidInput("a number, 0 or more", field="threshold")
    for_seconds = fields.get("for_seconds", 0)
    if isinstance(for_seconds, bool) or not isinstance(for_seconds, int):
        raise InvalidInput("whole seconds", field="for_seconds")
    if not 0 <= for_seconds <= 7 * 86400:
        raise InvalidInput("0 to 7 days (in seconds)", field="for_seconds")
    out: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "threshold": float(threshold),
        "for_seconds": for_seconds,
        "group": "",
        "measure": "",
        "limit": "",
        "connector": "",
    }
    if kind == AlertKind.CONSUMER_LAG:
        out["group"] = str(fields.get("group") or "")[:255]
        out["measure"] = fields.get("measure") or LagMeasure.RECORDS
        if out["measure"] not in LagMeasure.values:
            raise InvalidInput("records or seconds", field="measure")
    elif kind == AlertKind.USAGE:
        out["limit"] = fields.get("limit")
        if out["limit"] not in UsageLimit.values:
            raise InvalidInput(f"one of {', '.join(UsageLimit.values)}", field="limit")
        if not 0 < threshold <= 100:
            raise InvalidInput(
                "a percentage of the limit, over 0 and at most 100", field="threshold"
            )
    elif kind == AlertKind.CONNECTOR_FAILED:
        out["connector"] = str(fields.get("connector") or "")[:255]
    emails = fields.get("emails") or []
    if not isinstance(emails, list) or len(emails) > MAX_EMAILS:
        raise InvalidInput(f"a list of at most {MAX_EMAILS} addresses", field="emails")
    for address in emails:
        try:
            validate_email(address)
        except Exception:  # noqa: BLE001 - ValidationError, or not a string at all
            raise InvalidInput(f"{address!r} is not an e-mail address", field="emails") from None
    out["emails"] = [a.strip().lower() for a in emails]
    webhook = str(fields.get("webhook_url") or "")
    out["webhook_url"] = check_webhook_url(webhook) if webhook else ""
    if not out["emails"] and not out["webhook_url"]:
        raise InvalidInput("give at least one e-mail address or a webhook URL", field="emails")
    return out


@dataclass(frozen=True)
class CreatedRule:
    rule: AlertRule
    webhook_secret: str  # shown once ("" without a webhook)


@transaction.atomic
def create_rule(actor: Actor, tenant: Tenant, fields: dict[str, Any]) -> CreatedRule:
    checked = _check(fields)
    if AlertRule.objects.filter(tenant=tenant, name=checked["name"]).exists():
        raise AlreadyExists(f"an alert rule named {checked['name']!r} exists", field="name")
    secret = secrets.token_hex(32) if checked["webhook_url"] else ""
    try:
        with transaction.atomic():
            rule = AlertRule.objects.create(
                tenant=tenant,
                webhook_secret=secret,
                enabled=bool(fields.get("enabled", True)),
                created_by=actor.user,
                **checked,
            )
    except IntegrityError:
        raise AlreadyExists(
            f"an alert rule named {checked['name']!r} exists", field="name"
        ) from None
    _audit(actor, rule, "alert_rule.create", after=rule_snapshot(rule))
    return CreatedRule(rule, secret)


@transaction.atomic
def update_rule(actor: Actor, rule: AlertRule, changes: dict[str, Any]) -> AlertRule:
    """Change a rule (any of its fields; ``kind`` stays). A new webhook URL keeps the
    secret; a rule changed starts measuring its subjects afresh."""
    rule = AlertRule.objects.select_for_update().get(pk=rule.pk)
    before = rule_snapshot(rule)
    if "kind" in changes and changes["kind"] != rule.kind:
        raise InvalidInput("a rule's kind does not change; make another rule", field="kind")
    merged = {**before, **{k: v for k, v in changes.items() if k in before}}
    checked = _check(merged)
    if checked["name"] != rule.name and (
        AlertRule.objects.filter(tenant=rule.tenant, name=checked["name"]).exists()
    ):
        raise AlreadyExists(f"an alert rule named {checked['name']!r} exists", field="name")
    for key, value in checked.items():
        setattr(rule, key, value)
    rule.enabled = bool(merged.get("enabled", True))
    if rule.webhook_url and not rule.webhook_secret:
        rule.webhook_secret = secrets.token_hex(32)
    if rule_snapshot(rule) == before:
        return rule
    rule.save()
    # Subjects not firing start over; firing ones resolve under the new rule if they must.
    AlertState.objects.filter(rule=rule, firing=False).delete()
    _audit(actor, rule, "alert_rule.update", before=before, after=rule_snapshot(rule))
    return rule


@transaction.atomic
def delete_rule(actor: Actor, rule: AlertRule) -> None:
    _audit(actor, rule, "alert_rule.delete", before=rule_snapshot(rule))
    rule.delete()


def _audit(actor: Actor, rule: AlertRule, action: str, **change: Any) -> None:
    record_event(
        actor,
        tenant=rule.tenant,
        action=action,
        object_type="alert_rule",
        object_id=rule.pk,
        object_repr=rule.name,
        **change,
    )


# --- measuring ------------------------------------------------------------------------------

# Each subject's value; None: it exists but cannot be measured now (its state is left as
# it is). A subject missing from the dict is gone (what fired for it resolves).
Values = dict[str, float | None]


def _lag(rule: AlertRule, now: datetime) -> Values:
    """Each group's lag at its latest sample (records summed, seconds the worst)."""
    fresh = now - timedelta(seconds=max(600, 5 * settings.MILLRACE_LAG_SAMPLE_SECONDS))
    groups = ConsumerGroup.objects.filter(tenant_id=rule.tenant_id)
    if rule.group:
        groups = groups.filter(group_id=rule.group)
    latest = (
        LagSample.objects.filter(group__in=groups, at__gte=fresh)
        .values("group_id", "group__group_id")
        .annotate(last=Max("at"))
    )
    values: Values = dict.fromkeys(groups.values_list("group_id", flat=True))
    for row in latest:
        samples = LagSample.objects.filter(group_id=row["group_id"], at=row["last"])
        if rule.measure == LagMeasure.SECONDS:
            seconds = [s for s in samples.values_list("lag_seconds", flat=True) if s is not None]
            values[row["group__group_id"]] = max(seconds, default=0.0)
        else:
            values[row["group__group_id"]] = float(samples.aggregate(n=Sum("lag"))["n"] or 0)
    return values


def _usage(rule: AlertRule, now: datetime) -> Values:
    """The limit's use, as a percentage of what the tenant's plan allows."""
    tenant = Tenant.objects.get(pk=rule.tenant_id)
    if rule.limit == UsageLimit.PARTITIONS:
        used = Topic.objects.filter(tenant=tenant).aggregate(n=Sum("partition_count"))["n"] or 0
        return {rule.limit: 100.0 * used / tenant.max_partitions}
    if rule.limit == UsageLimit.STORAGE:
        latest = (
            TopicSample.objects.filter(topic__tenant=tenant)
            .values("topic_id")
            .annotate(last=Max("at"))
        )
        used = sum(
            TopicSample.objects.filter(topic_id=r["topic_id"], at=r["last"])
            .values_list("size_bytes", flat=True)
            .first()
            or 0
            for r in latest
        )
        return {rule.limit: 100.0 * used / tenant.max_storage_bytes}
    # A rate: the last whole hour's bytes against what the rate allows in an hour.
    hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    field, rate = (
        ("produce_bytes", tenant.produce_byte_rate)
        if rule.limit == UsageLimit.PRODUCE
        else ("fetch_bytes", tenant.fetch_byte_rate)
    )
    used = UsageHour.objects.filter(tenant=tenant, hour=hour).aggregate(n=Sum(field))["n"] or 0
    return {rule.limit: 100.0 * used / (rate * 3600)}


def _connectors(rule: AlertRule, now: datetime) -> Values | None:
    """1 for each failed connector or task, 0 for the others (None: cannot tell now)."""
    tenant = Tenant.objects.get(pk=rule.tenant_id)
    try:
        states = connect_services.connector_states(tenant.slug)
    except (ServiceError, connect_services.ConnectError) as exc:
        logger.warning("alert %s: the Connect cluster could not be read: %s", rule.pk, exc)
        return None
    values: Values = {}
    for subject, state in (states or {}).items():
        if rule.connector and subject.split("/")[0] != rule.connector:
            continue
        values[subject] = 1.0 if state == "FAILED" else 0.0
    return values


def _keys(rule: AlertRule, now: datetime) -> Values:
    """Days left before each active key that expires does."""
    keys = ApiKey.objects.filter(
        tenant_id=rule.tenant_id, revoked_at__isnull=True, expires_at__isnull=False
    )
    return {k.key_id: (k.expires_at - now).total_seconds() / 86400 for k in keys}


MEASURES: dict[str, Callable[[AlertRule, datetime], Values | None]] = {
    AlertKind.CONSUMER_LAG: _lag,
    AlertKind.USAGE: _usage,
    AlertKind.CONNECTOR_FAILED: _connectors,
    AlertKind.KEY_EXPIRING: _keys,
}


def breaches(rule: AlertRule, value: float) -> bool:
    if rule.kind == AlertKind.KEY_EXPIRING:
        return value <= rule.threshold
    if rule.kind == AlertKind.CONNECTOR_FAILED:
        return value >= 1
    return value > rule.threshold


# --- evaluating -----------------------------------------------------------------------------


@dataclass
class Evaluation:
    rules: int = 0
    fired: int = 0
    resolved: int = 0


def evaluate(now: datetime | None = None) -> Evaluation:
    """Measure every enabled rule and fire or resolve its subjects."""
    now = now or timezone.now()
    result = Evaluation()
    for rule in AlertRule.objects.filter(enabled=True).select_related("tenant"):
        if rule.tenant.deletion_requested_at is not None:
            continue
        try:
            values = MEASURES[rule.kind](rule, now)
        except Exception:
            logger.exception("alert rule %s could not be measured", rule.pk)
            continue
        if values is None:
            continue
        result.rules += 1
        subjects = set(values) | set(
            AlertState.objects.filter(rule=rule).values_list("subject", flat=True)
        )
        for subject in sorted(subjects):
            if subject in values and values[subject] is None:
                continue  # not measurable now: nothing changes for it
            event = _step(rule, subject, values.get(subject), now)
            result.fired += event == "firing"
            result.resolved += event == "resolved"
    return result


def _step(rule: AlertRule, subject: str, value: float | None, now: datetime) -> str | None:
    """Move one subject's state (under its row lock); the event it caused, if any.
    ``value`` None: the subject is gone."""
    with transaction.atomic():
        state, _ = AlertState.objects.select_for_update().get_or_create(rule=rule, subject=subject)
        state.checked_at = now
        event = None
        if value is not None and breaches(rule, value):
            state.value = value
            state.breaching_since = state.breaching_since or now
            held = (now - state.breaching_since).total_seconds()
            if not state.firing and held >= rule.for_seconds:
                state.firing, state.fired_at, event = True, now, "firing"
        else:
            state.value = value
            state.breaching_since = None
            if state.firing:
                state.firing, state.resolved_at, event = False, now, "resolved"
        if value is None and not state.firing:
            state.delete()  # the subject is gone and nothing is open for it
        else:
            state.save()
        if event is not None:
            _notify(rule, subject, event, value, now)
    return event


def message(rule: AlertRule, subject: str, event: str, value: float | None) -> str:
    shown = "unknown" if value is None else f"{value:g}"
    what = {
        AlertKind.CONSUMER_LAG: f"consumer group {subject} lag is {shown} {rule.measure}",
        AlertKind.USAGE: f"{subject} use is {shown}% of the plan's limit",
        AlertKind.CONNECTOR_FAILED: f"connector {subject} is "
        + ("FAILED" if value == 1 else "no longer failed"),
        AlertKind.KEY_EXPIRING: f"API key {subject} expires in {shown} days",
    }[AlertKind(rule.kind)]
    verb = "FIRING" if event == "firing" else "resolved"
    return f"[{rule.tenant.slug}] {rule.name} {verb}: {what} (threshold {rule.threshold:g})"


def _notify(rule: AlertRule, subject: str, event: str, value: float | None, now: datetime) -> None:
    payload = {
        "event": event,
        "tenant": rule.tenant.slug,
        "rule": {"id": rule.pk, "name": rule.name, "kind": rule.kind},
        "subject": subject,
        "value": value,
        "threshold": rule.threshold,
        "for_seconds": rule.for_seconds,
        "at": now.isoformat(),
        "message": message(rule, subject, event, value),
    }
    notification = Notification.objects.create(
        rule=rule, subject=subject, event=event, payload=payload
    )
    payload["id"] = notification.pk
    Notification.objects.filter(pk=notification.pk).update(payload=payload)
    deliveries = [
        Delivery(notification=notification, channel="email", target=address)
        for address in rule.emails
    ]
    if rule.webhook_url:
        deliveries.append(
            Delivery(notification=notification, channel="webhook", target=rule.webhook_url)
        )
    made = Delivery.objects.bulk_create(deliveries)
    ids = [d.pk for d in made if d.pk is not None] or list(
        Delivery.objects.filter(notification=notification).values_list("pk", flat=True)
    )
    transaction.on_commit(lambda: _enqueue(ids))


def _enqueue(ids: list[int]) -> None:
    from control_plane.alerts.tasks import deliver

    for pk in ids:
        try:
            deliver.delay(pk)
        except Exception:  # noqa: BLE001 - the beat's retry_deliveries sends it
            logger.warning("could not queue delivery %s; the retry sweep sends it", pk)


# --- delivering -----------------------------------------------------------------------------


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Millrace-Signature`` header: the HMAC-SHA256 of ``<timestamp>.<body>``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify(secret: str, header: str, body: bytes, *, tolerance_s: int = 300) -> bool:
    """What a receiver does: the signature matches and is recent."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), header)


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failure: the first retry interval, doubled each
    time, at most an hour."""
    return timedelta(
        seconds=min(3600, settings.MILLRACE_ALERT_RETRY_SECONDS * 2 ** max(0, attempts - 1))
    )


def _claim(delivery_id: int, now: datetime) -> Delivery | None:
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True)
            .select_related("notification__rule")
            .filter(pk=delivery_id, state=DeliveryState.PENDING)
            .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
            .first()
        )
        if delivery is None:
            return None
        delivery.attempts += 1
        # In flight: the retry sweep leaves it alone until this attempt has had its time.
        delivery.next_attempt_at = now + timedelta(seconds=WEBHOOK_TIMEOUT_S * 3)
        delivery.save(update_fields=["attempts", "next_attempt_at"])
    return delivery


def deliver(delivery_id: int) -> str | None:
    """Send one due delivery; its state afterwards (None: not due, or taken)."""
    now = timezone.now()
    delivery = _claim(delivery_id, now)
    if delivery is None:
        return None
    notification = delivery.notification
    status: int | None = None
    try:
        if delivery.channel == "email":
            _send_email(delivery.target, notification)
        else:
            status = _post_webhook(delivery.target, notification)
    except DeliveryFailed as exc:
        status = exc.status
        failed = delivery.attempts >= settings.MILLRACE_ALERT_DELIVERY_ATTEMPTS
        Delivery.objects.filter(pk=delivery.pk).update(
            state=DeliveryState.FAILED if failed else DeliveryState.PENDING,
            next_attempt_at=None if failed else timezone.now() + backoff(delivery.attempts),
            last_status=status,
            last_error=str(exc)[:2000],
        )
        logger.warning(
            "alert delivery %s (%s) attempt %d failed: %s",
            delivery.pk,
            delivery.channel,
            delivery.attempts,
            exc,
        )
        return DeliveryState.FAILED if failed else DeliveryState.PENDING
    Delivery.objects.filter(pk=delivery.pk).update(
        state=DeliveryState.DELIVERED,
        delivered_at=timezone.now(),
        next_attempt_at=None,
        last_status=status,
        last_error="",
    )
    return DeliveryState.DELIVERED


def due_deliveries(now: datetime | None = None) -> list[int]:
    now = now or timezone.now()
    return list(
        Delivery.objects.filter(state=DeliveryState.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .values_list("pk", flat=True)[:500]
    )


class DeliveryFailed(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _send_email(address: str, notification: Notification) -> None:
    payload = notification.payload
    body = (
        f"{payload['message']}\n\n"
        f"Rule: {payload['rule']['name']} ({payload['rule']['kind']})\n"
        f"Subject: {payload['subject']}\nValue: {payload['value']}\n"
        f"Threshold: {payload['threshold']}\nAt: {payload['at']}\n"
    )
    try:
        send_mail(
            payload["message"][:200],
            body,
            settings.DEFAULT_FROM_EMAIL,
            [address],
            fail_silently=False,
        )
    except OSError as exc:  # smtplib's errors are OSErrors
        raise DeliveryFailed(f"the mail server did not take it: {exc}") from None


def _post_webhook(url: str, notification: Notification) -> int:
    rule = notification.rule
    try:
        check_webhook_url(url)  # again: what the host resolves to may have changed
    except InvalidInput as exc:
        raise DeliveryFailed(exc.message) from None
    body = json.dumps(notification.payload, separators=(",", ":")).encode()
    request = urllib.request.Request(  # noqa: S310 - http(s) only (check_webhook_url)
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Millrace-Alerts/1",
            SIGNATURE_HEADER: sign(rule.webhook_secret, int(time.time()), body),
            "Millrace-Event": f"alert.{notification.event}",
            "Millrace-Notification": str(notification.pk),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        raise DeliveryFailed(f"the receiver answered HTTP {exc.code}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DeliveryFailed(f"the receiver could not be reached: {reason}") from None
