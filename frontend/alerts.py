"""The tenant's alert rules: every rule with what is firing, a form to make one (admins),
and a rule's page with its delivery log. ``control_plane.alerts.services`` does the work,
as over REST. A new rule's webhook secret is shown once, on the page that follows."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from control_plane.access.policy import ALERT_RULE_NEEDS as NEEDS
from control_plane.alerts import services
from control_plane.alerts.models import AlertKind, AlertRule, Delivery, LagMeasure, UsageLimit
from control_plane.core.errors import ServiceError
from frontend.console import Page, form_errors, member_view


def _fields(post: Any) -> dict[str, Any]:
    """The form as the service takes it (numbers parsed; a bad one left for it to refuse)."""

    def number(name: str, cast: type) -> Any:
        raw = post.get(name, "").strip()
        try:
            return cast(raw) if raw else (0 if name == "for_seconds" else None)
        except ValueError:
            return raw

    emails = [e.strip() for e in post.get("emails", "").replace(",", " ").split() if e.strip()]
    return {
        "name": post.get("name", ""),
        "kind": post.get("kind", ""),
        "group": post.get("group", ""),
        "measure": post.get("measure", ""),
        "limit": post.get("limit", ""),
        "connector": post.get("connector", ""),
        "threshold": number("threshold", float),
        "for_seconds": number("for_seconds", int),
        "emails": emails,
        "webhook_url": post.get("webhook_url", ""),
    }


def _list(
    page: Page, errors: dict[str, str] | None = None, form: Any = None, status: int = 200
) -> HttpResponse:
    rules = AlertRule.objects.filter(tenant=page.tenant).prefetch_related("states")
    return page.render(
        "frontend/alerts.html",
        {
            "rules": [
                {"rule": r, "firing": [s.subject for s in r.states.all() if s.firing]}
                for r in rules
            ],
            "may_change": page.may(NEEDS["create"]),
            "kinds": AlertKind.choices,
            "measures": LagMeasure.choices,
            "limits": UsageLimit.choices,
            "errors": errors or {},
            "form": form or {},
        },
        status=status,
    )


@member_view("alerts")
def alert_list(page: Page) -> HttpResponse:
    if page.request.method != "POST":
        return _list(page)
    page.require(NEEDS["create"])
    try:
        created = services.create_rule(page.actor, page.tenant, _fields(page.request.POST))
    except ServiceError as exc:
        return _list(page, form_errors(exc), page.request.POST, status=400)
    messages.success(page.request, f"Alert rule {created.rule.name} created.")
    # The rule's page, with its webhook secret this once (not through a redirect: the
    # secret stays out of cookies and the session).
    return _detail(page, created.rule, secret=created.webhook_secret, status=201)


@member_view("alerts")
def alert_detail(page: Page, pk: int) -> HttpResponse:
    return _detail(page, page.owned(AlertRule.objects.all(), "alert rule", pk=pk))


def _detail(page: Page, rule: AlertRule, secret: str = "", status: int = 200) -> HttpResponse:
    rule = AlertRule.objects.prefetch_related("states").get(pk=rule.pk)
    deliveries = Delivery.objects.filter(notification__rule=rule).select_related("notification")
    return page.render(
        "frontend/alert_detail.html",
        {
            "rule": rule,
            "secret": secret,
            "states": [s for s in rule.states.all() if s.firing or s.breaching_since],
            "deliveries": deliveries[:100],
            "may_change": page.may(NEEDS["destroy"]),
        },
        status=status,
    )


@require_POST
@member_view("alerts")
def alert_toggle(page: Page, pk: int) -> HttpResponse:
    page.require(NEEDS["partial_update"])
    rule = page.owned(AlertRule.objects.all(), "alert rule", pk=pk)
    page.act(
        lambda: services.update_rule(page.actor, rule, {"enabled": not rule.enabled}),
        f"Alert rule {rule.name} {'paused' if rule.enabled else 'enabled'}.",
    )
    return redirect("frontend:alert", tenant_slug=page.tenant.slug, pk=rule.pk)


@require_POST
@member_view("alerts")
def alert_delete(page: Page, pk: int) -> HttpResponse:
    page.require(NEEDS["destroy"])
    rule = page.owned(AlertRule.objects.all(), "alert rule", pk=pk)
    page.act(lambda: services.delete_rule(page.actor, rule), f"Alert rule {rule.name} deleted.")
    return redirect("frontend:alerts", tenant_slug=page.tenant.slug)
