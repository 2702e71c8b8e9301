"""What every console page shares: the signed-in member's tenant and role, and role checks.

A console page belongs to one tenant (``/t/<slug>/...``). A tenant the user is not a member
of does not exist for them (404, as in the REST API). Actions name the REST API's own
``Need`` (the tables of ``control_plane.access.policy``), so the console can never allow
what the API refuses; the template gets ``may`` to hide what the role cannot do.

Views that htmx calls return a partial template when the request comes from htmx
(``HX-Request``), and the whole page otherwise, so every URL also works without script.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from control_plane.access.policy import Need
from control_plane.core.actor import Actor
from control_plane.core.errors import ServiceError
from control_plane.core.http import client_ip
from control_plane.core.request_context import bind_tenant, bind_user
from control_plane.tenancy.models import Membership, Role, Tenant

M = TypeVar("M", bound=Model)


@dataclass
class Page:
    request: HttpRequest
    membership: Membership
    section: str

    @property
    def tenant(self) -> Tenant:
        return self.membership.tenant

    @property
    def role(self) -> str:
        return self.membership.role

    @property
    def actor(self) -> Actor:
        return Actor(user=self.request.user, source_ip=client_ip(self.request))

    @property
    def htmx(self) -> bool:
        return self.request.headers.get("HX-Request") == "true"

    def may(self, need: Need | str | None) -> bool:
        role = need.role if isinstance(need, Need) else need
        return role is not None and Role.at_least(self.role, role)

    def require(self, need: Need | str | None) -> None:
        if not self.may(need):
            role = need.role if isinstance(need, Need) else need
            raise PermissionDenied(
                f"this needs the {role} role or higher in {self.tenant.name}"
                if role
                else "this action is not available in the console"
            )

    def act(self, action: Callable[[], object], success: str) -> bool:
        """Run a service call for a form's POST; flash its error or ``success``."""
        try:
            action()
        except ServiceError as exc:
            messages.error(self.request, exc.message)
            return False
        messages.success(self.request, success)
        return True

    def owned(self, rows: QuerySet[M], what: str, **lookup: Any) -> M:
        """This tenant's one row of ``rows`` matching ``lookup``; 404 "no such <what>".

        Another tenant's object is as absent as a missing one.
        """
        found = rows.filter(tenant=self.tenant, **lookup).first()
        if found is None:
            raise Http404(f"no such {what}")
        return found

    def render(
        self,
        template: str,
        context: dict[str, Any] | None = None,
        *,
        partial: str | None = None,
        status: int = 200,
    ) -> HttpResponse:
        """``template``, or ``partial`` when htmx asked (and one is given)."""
        full = {
            "tenant": self.tenant,
            "role": self.role,
            "section": self.section,
            "may": {
                name: Role.at_least(self.role, name)
                for name in (Role.VIEWER, Role.DEVELOPER, Role.ADMIN, Role.OWNER)
            },
            **(context or {}),
        }
        chosen = partial if partial and self.htmx else template
        return render(self.request, chosen, full, status=status)


def membership_of(request: HttpRequest, tenant_slug: str) -> Membership:
    membership = (
        Membership.objects.filter(user=request.user, tenant__slug=tenant_slug)
        .select_related("tenant")
        .first()
    )
    if membership is None:
        raise Http404("no such tenant")
    bind_tenant(membership.tenant.slug)
    bind_user(request.user)
    return membership


def member_view(
    section: str, role: str | None = Role.VIEWER
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A tenant page for members with at least ``role``; the view gets a :class:`Page`."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @functools.wraps(view)
        def wrapper(request: HttpRequest, tenant_slug: str, **kwargs: Any) -> HttpResponse:
            page = Page(request, membership_of(request, tenant_slug), section)
            page.require(role)
            return view(page, **kwargs)

        return wrapper

    return decorate


def base_url(request: HttpRequest) -> str:
    """Where links in mail point: ``MILLRACE_PUBLIC_URL``, else this request's site."""
    return str(settings.MILLRACE_PUBLIC_URL or request.build_absolute_uri("/"))


def form_errors(exc: ServiceError, fields: dict[str, str] | None = None) -> dict[str, str]:
    """A service's error as {form field: message}; ``form`` when it names no field.

    ``fields`` maps the service's field names to the form's where they differ.
    """
    field = exc.field or "form"
    return {(fields or {}).get(field, field): exc.message}
