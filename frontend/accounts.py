"""Accounts in the console: sign-up and e-mail verification, password reset and change,
a tenant of one's own, invitations, and the development server's mail page.

The rules live in ``control_plane.accounts.services``; these views turn them into pages.
Every page works without script.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from control_plane.accounts import mail, tokens_api, two_factor
from control_plane.accounts import services as accounts
from control_plane.accounts.models import OutboxMail, PersonalToken
from control_plane.core.actor import Actor
from control_plane.core.errors import InvalidInput, ServiceError
from control_plane.core.http import client_ip
from frontend.console import base_url, form_errors


def _actor(request: HttpRequest) -> Actor:
    return Actor(user=request.user, source_ip=client_ip(request))


def _next(request: HttpRequest) -> str:
    """A safe local ``next`` from the request, or ''."""
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(wanted, {request.get_host()}, request.is_secure()):
        return wanted
    return ""


def _mail_context() -> dict[str, Any]:
    return {"dev_mail": settings.DEBUG and mail.uses_outbox()}


# --- sign-up and verification -------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect(_next(request) or "frontend:home")
    context: dict[str, Any] = {
        "enabled": settings.MILLRACE_SIGNUP_ENABLED,
        "next": _next(request),
        "form": {"email": request.GET.get("email", "")},
        "errors": {},
    }
    if request.method != "POST":
        return render(request, "frontend/signup.html", context)
    email = request.POST.get("email", "")
    context["form"] = {"email": email}
    try:
        done = accounts.sign_up(
            email=email, password=request.POST.get("password", ""), base_url=base_url(request)
        )
    except ServiceError as exc:
        context["errors"] = form_errors(exc, {"email": "email", "password": "password"})
        return render(request, "frontend/signup.html", context, status=400)
    return render(
        request,
        "frontend/signup_done.html",
        {"email": done.email, "next": context["next"], **_mail_context()},
    )


def verify_email(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """The link in the verification mail: proves the address. It does not sign anyone in
    (a link that did would be a password in a mailbox); the person signs in next."""
    try:
        user = accounts.verify_email(uidb64, token)
    except ServiceError as exc:
        return render(request, "frontend/verify_failed.html", {"error": exc.message}, status=400)
    messages.success(request, f"{user.email} is confirmed.")
    if request.user.is_authenticated and request.user.pk == user.pk:
        return redirect("frontend:home")
    return redirect(f"{reverse('frontend:login')}?username={user.get_username()}")


@require_POST
@login_required
def verify_resend(request: HttpRequest) -> HttpResponse:
    try:
        accounts.send_verification(request.user, base_url(request))
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"A new link is on its way to {request.user.email}.")
    return redirect("frontend:home")


# --- the signed-in person's account -------------------------------------------------------


@login_required
def account(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "frontend/account.html",
        {
            "verified": accounts.is_verified(request.user),
            "two_factor": two_factor.is_enabled(request.user),
            "codes_left": two_factor.recovery_codes_left(request.user),
            "tokens": PersonalToken.objects.filter(user=request.user)[:50],
            "section": "account",
        },
    )


@require_POST
@login_required
def token_create(request: HttpRequest) -> HttpResponse:
    days = request.POST.get("expires_in_days", "").strip()
    try:
        if days and not days.isdigit():
            raise InvalidInput("a whole number of days, or empty", field="expires_in_days")
        created = tokens_api.create(
            _actor(request),
            name=request.POST.get("name", ""),
            expires_in_days=int(days) if days else None,
        )
    except ServiceError as exc:
        messages.error(request, f"No token made: {exc.message}.")
        return redirect("frontend:account")
    response = render(
        request,
        "frontend/token_created.html",
        {"token": created.token, "text": created.text, "section": "account"},
    )
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@login_required
def token_revoke(request: HttpRequest, token_id: str) -> HttpResponse:
    token = PersonalToken.objects.filter(user=request.user, token_id=token_id).first()
    if token is None:
        raise Http404("no such token")
    try:
        tokens_api.revoke(_actor(request), token)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Token {token.name} revoked.")
    return redirect("frontend:account")


SETUP = "millrace_two_factor_setup"


def _codes_page(request: HttpRequest, codes: list[str]) -> HttpResponse:
    response = render(
        request, "frontend/recovery_codes.html", {"codes": codes, "section": "account"}
    )
    response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def two_factor_setup(request: HttpRequest) -> HttpResponse:
    """Turn two-factor on: scan the secret, then prove it with a code."""
    if two_factor.is_enabled(request.user):
        return redirect("frontend:account")
    secret = request.session.get(SETUP) or two_factor.new_secret()
    request.session[SETUP] = secret
    error = None
    if request.method == "POST":
        try:
            codes = two_factor.enable(_actor(request), secret, request.POST.get("code", ""))
        except ServiceError as exc:
            error = exc.message
        else:
            request.session.pop(SETUP, None)
            messages.success(request, "Two-factor sign-in is on.")
            return _codes_page(request, codes)
    uri = two_factor.provisioning_uri(request.user, secret)
    response = render(
        request,
        "frontend/two_factor_setup.html",
        {"secret": secret, "qr": two_factor.qr_svg(uri), "error": error, "section": "account"},
        status=400 if error else 200,
    )
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@login_required
def two_factor_off(request: HttpRequest) -> HttpResponse:
    try:
        two_factor.disable(
            _actor(request), request.POST.get("password", ""), request.POST.get("code", "")
        )
    except ServiceError as exc:
        messages.error(request, f"Two-factor sign-in stays on: {exc.message}.")
    else:
        messages.success(request, "Two-factor sign-in is off.")
    return redirect("frontend:account")


@require_POST
@login_required
def recovery_codes(request: HttpRequest) -> HttpResponse:
    try:
        codes = two_factor.renew_recovery_codes(_actor(request), request.POST.get("code", ""))
    except ServiceError as exc:
        messages.error(request, f"The recovery codes stay as they were: {exc.message}.")
        return redirect("frontend:account")
    return _codes_page(request, codes)


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's: the password changes and every other session of the account ends (its
    session hash no longer matches); this one goes on."""

    template_name = "frontend/password_change.html"
    success_url = reverse_lazy("frontend:account")

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        messages.success(self.request, "Password changed; other sessions were signed out.")
        return response


class PasswordResetView(auth_views.PasswordResetView):
    """Asks for an address; the answer does not say whether it has an account."""

    template_name = "frontend/password_reset.html"
    email_template_name = "accounts/mail/password_reset_body.txt"
    subject_template_name = "accounts/mail/password_reset_subject.txt"
    success_url = reverse_lazy("frontend:password-reset-done")

    def form_valid(self, form: Any) -> HttpResponse:
        self.extra_email_context = {"base_url": base_url(self.request).rstrip("/")}
        return super().form_valid(form)


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "frontend/password_reset_done.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_mail_context()}


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "frontend/password_reset_confirm.html"
    success_url = reverse_lazy("frontend:password-reset-complete")

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        accounts.clear_login_failures(form.user.get_username(), form.user.email)
        return response


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "frontend/password_reset_complete.html"


# --- a tenant of one's own ----------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def tenant_create(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {
        "verified": accounts.is_verified(request.user),
        "form": {"slug": "", "name": ""},
        "errors": {},
    }
    if request.method != "POST":
        return render(request, "frontend/tenant_create.html", context)
    form = {k: request.POST.get(k, "").strip() for k in ("slug", "name")}
    context["form"] = form
    try:
        tenant = accounts.create_tenant(_actor(request), slug=form["slug"], name=form["name"])
    except ServiceError as exc:
        context["errors"] = form_errors(exc)
        return render(request, "frontend/tenant_create.html", context, status=400)
    messages.success(request, f"Tenant {tenant.name} created; you are its owner.")
    return redirect("frontend:get-started", tenant_slug=tenant.slug)


# --- invitations --------------------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """The link in an invitation mail: what it offers, and Accept for the right person."""
    try:
        found = accounts.invitation_for(token)
    except ServiceError as exc:
        raise Http404(exc.message) from None
    here = request.get_full_path()
    if not request.user.is_authenticated:
        return render(
            request,
            "frontend/invitation.html",
            {"invitation": found, "problem": None, "here": here},
        )
    if request.method == "POST":
        try:
            membership = accounts.accept_invitation(_actor(request), token)
        except ServiceError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(
                request,
                f"You joined {membership.tenant.name} as {membership.get_role_display().lower()}.",
            )
            return redirect("frontend:overview", tenant_slug=membership.tenant.slug)
    problem = accounts.check_acceptable(request.user, found)
    return render(
        request,
        "frontend/invitation.html",
        {"invitation": found, "problem": problem, "here": here},
        status=200 if problem is None else 409,
    )


# --- the development server's mail --------------------------------------------------------


def dev_mail(request: HttpRequest) -> HttpResponse:
    """Mail this server kept instead of sending (no SMTP host configured): development
    servers only (``DEBUG``), where it is the way to read verification links."""
    if not (settings.DEBUG and mail.uses_outbox()):
        raise Http404("mail is sent by SMTP on this server")
    return render(request, "frontend/dev_mail.html", {"mails": OutboxMail.objects.all()[:50]})


@require_POST
@login_required
def invitation_accept(request: HttpRequest, pk: int) -> HttpResponse:
    """Accept from the list of invitations to one's own address (the no-tenant page)."""
    try:
        membership = accounts.accept_own_invitation(_actor(request), pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("frontend:home")
    messages.success(
        request, f"You joined {membership.tenant.name} as {membership.get_role_display().lower()}."
    )
    return redirect("frontend:overview", tenant_slug=membership.tenant.slug)
