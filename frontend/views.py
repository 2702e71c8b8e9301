"""Sign-in and the landing redirect; tenant pages live in their own modules."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from control_plane.accounts import mail, oidc, two_factor
from control_plane.accounts import services as accounts
from control_plane.core import ratelimit
from control_plane.core.http import client_ip
from control_plane.tenancy.models import Membership
from frontend.console import base_url

LOGIN_SCOPE = "console_login"


class LoginView(auth_views.LoginView):
    """Django's login by username or e-mail, with failed attempts limited per client
    address and per account (a lockout that a password reset lifts)."""

    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {
            **super().get_context_data(**kwargs),
            "signup_enabled": settings.MILLRACE_SIGNUP_ENABLED,
            "sso": oidc.provider_name() if oidc.configured() else None,
            "prefill": self.request.POST.get("username") or self.request.GET.get("username", ""),
            "lockout_minutes": max(1, settings.MILLRACE_LOGIN_LOCKOUT_SECONDS // 60),
        }

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        ip = client_ip(request)
        if ratelimit.is_blocked(LOGIN_SCOPE, ip):
            messages.error(request, "Too many failed sign-in attempts. Wait a minute.")
            return self.render_to_response(self.get_context_data(), status=429)
        identifier = request.POST.get("username", "")
        if identifier and accounts.login_locked(identifier):
            ratelimit.record_failure(LOGIN_SCOPE, ip)
            return self.render_to_response(self.get_context_data(locked=True), status=429)
        response = super().post(request, *args, **kwargs)
        if request.user.is_authenticated or two_factor_pending(request):
            accounts.clear_login_failures(identifier)
        else:
            ratelimit.record_failure(LOGIN_SCOPE, ip)
            if identifier:
                accounts.record_login_failure(identifier)
        return response

    def form_valid(self, form: Any) -> HttpResponse:
        """The password is right: signed in, or, with two-factor on, asked for a code
        next (nothing of the account is reachable until it is given)."""
        user = form.get_user()
        if not two_factor.is_enabled(user):
            return super().form_valid(form)
        return ask_for_code(self.request, user, user.backend, self.get_success_url())


PENDING = "millrace_two_factor_pending"
PENDING_SECONDS = 300
CODE_TRIES = 5


def ask_for_code(request: HttpRequest, user: Any, backend: str, next_url: str) -> HttpResponse:
    """The first factor is proven: remember who, and ask for the second."""
    request.session.cycle_key()
    request.session[PENDING] = {
        "user": user.pk,
        "backend": backend,
        "at": time.time(),
        "next": next_url,
        "tries": 0,
    }
    return redirect("frontend:login-code")


def two_factor_pending(request: HttpRequest) -> dict[str, Any] | None:
    pending = request.session.get(PENDING)
    if not isinstance(pending, dict) or time.time() - pending["at"] > PENDING_SECONDS:
        return None
    return pending


@require_http_methods(["GET", "HEAD", "POST"])
def login_code(request: HttpRequest) -> HttpResponse:
    """The second step of signing in with two-factor on: a code from the app, or a
    recovery code. Wrong codes count toward the account's lockout; after a few, or after
    five minutes, it starts again from the password."""
    pending = two_factor_pending(request)
    user = get_user_model().objects.filter(pk=pending["user"]).first() if pending else None
    if pending is None or user is None:
        request.session.pop(PENDING, None)
        messages.error(request, "Sign in again: the sign-in expired.")
        return redirect("frontend:login")
    error = None
    if request.method == "POST":
        if accounts.login_locked(user.get_username()):
            request.session.pop(PENDING, None)
            messages.error(request, "Too many wrong codes. Wait, or reset your password.")
            return redirect("frontend:login")
        if two_factor.verify(user, request.POST.get("code", "")):
            request.session.pop(PENDING, None)
            login(request, user, backend=pending["backend"])
            accounts.clear_login_failures(user.get_username(), user.email)
            return redirect(pending["next"])
        accounts.record_login_failure(user.get_username())
        ratelimit.record_failure(LOGIN_SCOPE, client_ip(request))
        pending["tries"] += 1
        if pending["tries"] >= CODE_TRIES:
            request.session.pop(PENDING, None)
            messages.error(request, "Too many wrong codes. Sign in again.")
            return redirect("frontend:login")
        request.session[PENDING] = pending
        error = "That code is not right. Enter the app's current code, or a recovery code."
    return render(
        request, "frontend/login_code.html", {"error": error}, status=400 if error else 200
    )


def _sso_redirect_uri(request: HttpRequest) -> str:
    return base_url(request).rstrip("/") + reverse("frontend:login-sso-callback")


def login_sso(request: HttpRequest) -> HttpResponse:
    """Off to the OpenID Connect provider (``MILLRACE_OIDC_*``)."""
    if not oidc.configured():
        raise Http404("single sign-on is not configured")
    wanted = request.GET.get("next", "")
    safe = url_has_allowed_host_and_scheme(wanted, {request.get_host()}, request.is_secure())
    try:
        target = oidc.begin(request.session, _sso_redirect_uri(request), wanted if safe else "")
    except oidc.OidcError as exc:
        messages.error(request, f"Single sign-on did not work: {exc}.")
        return redirect("frontend:login")
    return redirect(target)


def login_sso_callback(request: HttpRequest) -> HttpResponse:
    """Back from the provider: the verified token's address names the account."""
    if not oidc.configured():
        raise Http404("single sign-on is not configured")
    try:
        claims, next_url = oidc.complete(
            request.session, request.GET.dict(), _sso_redirect_uri(request)
        )
        user = oidc.user_for(claims)
    except oidc.OidcError as exc:
        messages.error(request, f"Single sign-on did not work: {exc}.")
        return redirect("frontend:login")
    backend = settings.AUTHENTICATION_BACKENDS[0]
    if not user.is_active:
        messages.error(request, "This account is disabled.")
        return redirect("frontend:login")
    next_url = next_url or reverse("frontend:home")
    if two_factor.is_enabled(user):
        return ask_for_code(request, user, backend, next_url)
    login(request, user, backend=backend)
    return redirect(next_url)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    membership = Membership.objects.filter(user=request.user).select_related("tenant").first()
    if membership is not None:
        return redirect("frontend:overview", tenant_slug=membership.tenant.slug)
    if not accounts.is_verified(request.user):
        return render(
            request,
            "frontend/verify_pending.html",
            {"dev_mail": settings.DEBUG and mail.uses_outbox()},
        )
    return render(
        request,
        "frontend/no_tenant.html",
        {
            "invitations": accounts.pending_invitations_for(request.user),
            "may_create": settings.MILLRACE_SIGNUP_ENABLED or request.user.is_staff,
        },
    )
