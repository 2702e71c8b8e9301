"""Access pages: service accounts, their API keys, ACLs, and an ACL checker.

Every change goes through ``control_plane.access.services`` as the REST API does, and each
view requires the Need of the matching REST action (``control_plane.access.policy``).

An API key's secret exists only in the response to the POST that created it: it is rendered
directly into that page (``Cache-Control: no-store``), never stored, logged, flashed, or put
in a URL or redirect. Deletions and revocation ask for confirmation on a page of their own
(GET shows what will happen, POST does it), so they work without script.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from control_plane.access import policy, presets
from control_plane.access import services as access_services
from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.access.presets import PRESETS
from control_plane.access.services import CreatedApiKey
from control_plane.api.filters import AclFilter, ApiKeyFilter
from control_plane.core.errors import InvalidInput, ServiceError
from data_plane.acl import (
    CLUSTER_RESOURCE_NAME,
    VALID_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    Decision,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
)
from frontend.console import Page, form_errors, member_view
from frontend.snippets import client_snippets

SA_NEEDS = policy.SERVICE_ACCOUNT_NEEDS
KEY_NEEDS = policy.API_KEY_NEEDS
ACL_NEEDS = policy.ACL_NEEDS

# timedelta and datetime overflow not far past this; a century is longer than any key needs.
KEY_DAYS_MAX = 36_500

KEY_STATES = ("active", "revoked", "expired")
CHECKABLE_OPERATIONS = [op for op in Operation if op is not Operation.ALL]


def _service_account(page: Page, name: str) -> ServiceAccount:
    return page.owned(ServiceAccount.objects.all(), "service account", name=name)


def _api_key(page: Page, key_id: str) -> ApiKey:
    rows = ApiKey.objects.select_related("service_account")
    return page.owned(rows, "API key", key_id=key_id)


def _acl(page: Page, pk: int) -> Acl:
    return page.owned(Acl.objects.select_related("service_account"), "ACL", pk=pk)


def _accounts(page: Page) -> list[ServiceAccount]:
    return list(ServiceAccount.objects.filter(tenant=page.tenant))


def _choices(values: Any) -> list[tuple[str, str]]:
    return [(v.value, v.value) for v in values]


def _confirm(page: Page, context: dict[str, Any]) -> HttpResponse:
    return page.render("frontend/access_confirm.html", context)


# --- service accounts ---------------------------------------------------------------------


@member_view("service-accounts", role=SA_NEEDS["list"].role)
def service_account_list(page: Page) -> HttpResponse:
    now = timezone.now()
    active = Q(api_keys__revoked_at__isnull=True) & (
        Q(api_keys__expires_at__isnull=True) | Q(api_keys__expires_at__gt=now)
    )
    accounts = ServiceAccount.objects.filter(tenant=page.tenant).annotate(
        active_keys=Count("api_keys", filter=active)
    )
    return page.render("frontend/access_service_accounts.html", {"accounts": accounts})


PRESET_OPTIONS = [(name, f"{name}: {spec.why}") for name, spec in PRESETS.items()]
PATTERN_OPTIONS = [("literal", "exactly this name"), ("prefixed", "every name starting with it")]
# The preset service's field names -> this form's.
PRESET_FIELDS = {
    f"acl_preset.{k}": k
    for k in (
        "preset",
        "topic",
        "topic_pattern",
        "group",
        "group_pattern",
        "transactional_id",
        "transactional_id_pattern",
    )
}


@member_view("service-accounts", role=SA_NEEDS["create"].role)
def service_account_create(page: Page) -> HttpResponse:
    """A service account, and if asked, a preset's ACLs with it (all or nothing)."""
    form = {
        "name": "",
        "description": "",
        "preset": "",
        "topic": "",
        "topic_pattern": "literal",
        "group": "",
        "group_pattern": "prefixed",
        "transactional_id": "",
        "transactional_id_pattern": "prefixed",
    }
    errors: dict[str, str] = {}
    if page.request.method == "POST":
        form = {k: page.request.POST.get(k, v).strip() for k, v in form.items()}
        try:
            preset = presets.parse(form) if form["preset"] else None
            sa, acls = presets.create_with_preset(
                page.actor,
                page.tenant,
                name=form["name"],
                description=form["description"],
                preset=preset,
            )
        except ServiceError as exc:
            errors = form_errors(exc, PRESET_FIELDS)
        else:
            granted = f" with {len(acls)} ACLs ({preset.describe()})" if preset and acls else ""
            messages.success(page.request, f"Service account {sa.name} created{granted}.")
            if acls:
                return redirect(
                    reverse("frontend:acls", kwargs={"tenant_slug": page.tenant.slug})
                    + "?"
                    + urlencode({"principal": sa.principal})
                )
            return redirect("frontend:service-accounts", tenant_slug=page.tenant.slug)
    return page.render(
        "frontend/access_service_account_create.html",
        {
            "form": form,
            "errors": errors,
            "preset_options": PRESET_OPTIONS,
            "pattern_options": PATTERN_OPTIONS,
        },
        status=400 if errors else 200,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@member_view("service-accounts", role=SA_NEEDS["destroy"].role)
def service_account_delete(page: Page, name: str) -> HttpResponse:
    sa = _service_account(page, name)
    if page.request.method == "POST":
        access_services.delete_service_account(page.actor, sa)
        messages.success(page.request, f"Service account {sa.name} deleted.")
        return redirect("frontend:service-accounts", tenant_slug=page.tenant.slug)
    keys, acls = sa.api_keys.active().count(), sa.acls.count()
    return _confirm(
        page,
        {
            "title": f"Delete service account {sa.name}?",
            "back": reverse("frontend:service-accounts", args=[page.tenant.slug]),
            "back_label": "Service accounts",
            "consequences": [
                f"Its {keys} active API key(s) stop working at once; clients using them "
                "are disconnected.",
                f"Its {acls} ACL(s) are deleted.",
                "This cannot be undone.",
            ],
            "button": "Delete service account",
        },
    )


# --- API keys -------------------------------------------------------------------------------


@member_view("api-keys", role=KEY_NEEDS["list"].role)
def api_key_list(page: Page) -> HttpResponse:
    rows = ApiKey.objects.filter(tenant=page.tenant).select_related("service_account", "created_by")
    filters = {k: page.request.GET.get(k, "") for k in ("service_account", "state")}
    keys = ApiKeyFilter(page.request.GET, queryset=rows).qs
    return page.render(
        "frontend/access_api_keys.html",
        {
            "keys": keys,
            "filters": filters,
            "filtered": any(filters.values()),
            "accounts": _accounts(page),
            "states": KEY_STATES,
        },
        partial="frontend/partials/access_api_key_rows.html",
    )


def _expires_at(raw: str) -> datetime | None:
    if not raw:
        return None
    try:
        days = int(raw)
    except ValueError:
        raise InvalidInput("enter a whole number of days", field="expires_in_days") from None
    if not 1 <= days <= KEY_DAYS_MAX:
        raise InvalidInput(
            f"enter a number of days from 1 to {KEY_DAYS_MAX}", field="expires_in_days"
        )
    return timezone.now() + timedelta(days=days)


def key_created_page(
    page: Page,
    created: CreatedApiKey,
    *,
    topic: str | None = None,
    onboarding: dict[str, str] | None = None,
) -> HttpResponse:
    """The one and only place a key's secret is shown: this response, never cached, with
    client settings for it (and ``topic``)."""
    listener, snippets = client_snippets(
        page.request,
        page.tenant.slug,
        topic=topic,
        key_id=created.api_key.key_id,
        secret=created.secret,
    )
    response = page.render(
        "frontend/access_api_key_created.html",
        {
            "key": created.api_key,
            "secret": created.secret,
            "listener": listener,
            "snippets": snippets,
            "snippets_complete": True,
            "onboarding": onboarding,
        },
    )
    response["Cache-Control"] = "no-store"
    return response


@member_view("api-keys", role=KEY_NEEDS["create"].role)
def api_key_create(page: Page) -> HttpResponse:
    form = {
        "service_account": page.request.GET.get("service_account", ""),
        "description": "",
        "expires_in_days": "",
    }
    errors: dict[str, str] = {}
    if page.request.method == "POST":
        form = {k: page.request.POST.get(k, "").strip() for k in form}
        try:
            sa = ServiceAccount.objects.filter(
                tenant=page.tenant, name=form["service_account"]
            ).first()
            if sa is None:
                raise InvalidInput("choose a service account", field="service_account")
            created = access_services.create_api_key(
                page.actor,
                sa,
                description=form["description"],
                expires_at=_expires_at(form["expires_in_days"]),
            )
        except ServiceError as exc:
            errors = form_errors(exc, {"expires_at": "expires_in_days"})
        else:
            return key_created_page(page, created)
    return page.render(
        "frontend/access_api_key_create.html",
        {"form": form, "errors": errors, "accounts": _accounts(page)},
        status=400 if errors else 200,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@member_view("api-keys", role=KEY_NEEDS["destroy"].role)
def api_key_revoke(page: Page, key_id: str) -> HttpResponse:
    key = _api_key(page, key_id)
    if page.request.method == "POST":
        page.act(
            lambda: access_services.revoke_api_key(page.actor, key),
            f"API key {key.key_id} revoked.",
        )
        return redirect("frontend:api-keys", tenant_slug=page.tenant.slug)
    return _confirm(
        page,
        {
            "title": f"Revoke API key {key.key_id}?",
            "back": reverse("frontend:api-keys", args=[page.tenant.slug]),
            "back_label": "API keys",
            "consequences": [
                f"Clients authenticating as {key.service_account.principal} with this key "
                "are refused and disconnected.",
                "The key stays listed as revoked; it cannot be reactivated.",
            ],
            "button": "Revoke API key",
        },
    )


# --- ACLs ------------------------------------------------------------------------------------


def _principals(page: Page) -> list[tuple[str, str]]:
    return [(WILDCARD_PRINCIPAL, f"{WILDCARD_PRINCIPAL} (every principal)")] + [
        (sa.principal, sa.principal) for sa in _accounts(page)
    ]


@member_view("acls", role=ACL_NEEDS["list"].role)
def acl_list(page: Page) -> HttpResponse:
    filters = {k: page.request.GET.get(k, "") for k in ("principal", "resource_type")}
    rows = Acl.objects.filter(tenant=page.tenant).select_related("service_account")
    acls = AclFilter({k: v for k, v in filters.items() if v}, queryset=rows).qs
    return page.render(
        "frontend/access_acls.html",
        {
            "acls": acls,
            "filters": filters,
            "filtered": any(filters.values()),
            "principals": _principals(page),
            "resource_types": _choices(ResourceType),
        },
        partial="frontend/partials/access_acl_rows.html",
    )


@member_view("acls", role=ACL_NEEDS["create"].role)
def acl_create(page: Page) -> HttpResponse:
    form = {
        "principal": page.request.GET.get("principal", ""),
        "resource_type": ResourceType.TOPIC.value,
        "pattern_type": PatternType.LITERAL.value,
        "resource_name": "",
        "operation": Operation.READ.value,
        "permission": Permission.ALLOW.value,
        "host": WILDCARD_HOST,
    }
    errors: dict[str, str] = {}
    if page.request.method == "POST":
        form = {k: page.request.POST.get(k, "").strip() for k in form}
        try:
            acl = access_services.create_acl(page.actor, page.tenant, **form)
        except ServiceError as exc:
            errors = form_errors(exc, {"non_field_errors": "form"})
        else:
            messages.success(page.request, f"ACL created: {acl}.")
            return redirect("frontend:acls", tenant_slug=page.tenant.slug)
    return page.render(
        "frontend/access_acl_create.html",
        {
            "form": form,
            "errors": errors,
            "principals": _principals(page),
            "resource_types": _choices(ResourceType),
            "pattern_types": _choices(PatternType),
            "operations": _choices(Operation),
            "permissions": _choices(Permission),
        },
        status=400 if errors else 200,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@member_view("acls", role=ACL_NEEDS["destroy"].role)
def acl_delete(page: Page, pk: int) -> HttpResponse:
    acl = _acl(page, pk)
    if page.request.method == "POST":
        access_services.delete_acl(page.actor, acl)
        messages.success(page.request, f"ACL deleted: {acl}.")
        return redirect("frontend:acls", tenant_slug=page.tenant.slug)
    return _confirm(
        page,
        {
            "title": "Delete this ACL?",
            "back": reverse("frontend:acls", args=[page.tenant.slug]),
            "back_label": "ACLs",
            "consequences": [
                str(acl),
                f"host {acl.host}",
                "Connected clients are re-checked against the remaining ACLs.",
            ],
            "button": "Delete ACL",
        },
    )


# --- ACL checker --------------------------------------------------------------------------


def _check(page: Page, form: dict[str, str]) -> Decision:
    """The tenant authorizer's decision for the question in ``form``."""
    if form["principal"] not in {sa.principal for sa in _accounts(page)}:
        raise InvalidInput("choose a service account", field="principal")
    try:
        resource_type = ResourceType(form["resource_type"])
    except ValueError:
        raise InvalidInput("choose a resource type", field="resource_type") from None
    try:
        operation = Operation(form["operation"])
    except ValueError:
        operation = None
    if operation is None or operation is Operation.ALL:
        raise InvalidInput("choose an operation", field="operation")
    if operation not in VALID_OPERATIONS[resource_type]:
        raise InvalidInput(
            f"{operation.value} does not apply to {resource_type.value} resources",
            field="operation",
        )
    name = form["resource_name"]
    if resource_type is ResourceType.CLUSTER:
        name = name or CLUSTER_RESOURCE_NAME
    elif not name:
        raise InvalidInput("enter the resource's name", field="resource_name")
    host = form["host"]
    if host:
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            raise InvalidInput("enter one IP address, or leave empty", field="host") from None
    return authorize(
        access_services.tenant_bindings(page.tenant.pk),
        principal=form["principal"],
        host=host,
        operation=operation,
        resource_type=resource_type,
        resource_name=name,
    )


@member_view("acl-check", role=ACL_NEEDS["list"].role)
def acl_check(page: Page) -> HttpResponse:
    """A GET form, so an answer has a URL; htmx swaps in only the answer."""
    fields = ("principal", "operation", "resource_type", "resource_name", "host")
    form = {k: page.request.GET.get(k, "").strip() for k in fields}
    decision: Decision | None = None
    errors: dict[str, str] = {}
    if "principal" in page.request.GET:
        try:
            decision = _check(page, form)
        except ServiceError as exc:
            errors = form_errors(exc)
    if not form["resource_type"]:
        form.update(resource_type=ResourceType.TOPIC.value, operation=Operation.READ.value)
    # A Decision is falsy when it denies, so test it against None.
    binding = decision.binding if decision is not None else None
    return page.render(
        "frontend/access_acl_check.html",
        {
            "form": form,
            "errors": errors,
            "decision": decision,
            "binding": binding,
            "implied": binding is not None and binding.operation != form["operation"],
            "accounts": _accounts(page),
            "resource_types": _choices(ResourceType),
            "operations": _choices(CHECKABLE_OPERATIONS),
        },
        partial="frontend/partials/access_acl_answer.html",
        # htmx 2 does not swap 4xx responses, so its partial reports errors with a 200.
        status=400 if errors and not page.htmx else 200,
    )
