"""Sign-in and the landing redirect; tenant pages live in their own modules."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from control_plane.core import ratelimit
from control_plane.core.http import client_ip
from control_plane.tenancy.models import Membership

LOGIN_SCOPE = "console_login"


class LoginView(auth_views.LoginView):
    """Django's login, with failed attempts limited per client address."""

    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        ip = client_ip(request)
        if ratelimit.is_blocked(LOGIN_SCOPE, ip):
            messages.error(request, "Too many failed sign-in attempts. Wait a minute.")
            return self.render_to_response(self.get_context_data(), status=429)
        response = super().post(request, *args, **kwargs)
        if not request.user.is_authenticated:
            ratelimit.record_failure(LOGIN_SCOPE, ip)
        return response


@login_required
def home(request: HttpRequest) -> HttpResponse:
    membership = Membership.objects.filter(user=request.user).select_related("tenant").first()
    if membership is not None:
        return redirect("frontend:overview", tenant_slug=membership.tenant.slug)
    return render(request, "frontend/no_tenant.html")
