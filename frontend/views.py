"""The console shell: sign-in, tenant navigation, and the topic list (Step 7 fills the rest)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from control_plane.catalog.models import Topic
from control_plane.core import ratelimit
from control_plane.core.http import client_ip
from control_plane.tenancy.models import Membership
from data_plane.topic_config import effective_configs

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
        return redirect("frontend:topics", tenant_slug=membership.tenant.slug)
    return render(request, "frontend/no_tenant.html")


def _membership(request: HttpRequest, tenant_slug: str) -> Membership:
    membership = (
        Membership.objects.filter(user=request.user, tenant__slug=tenant_slug)
        .select_related("tenant")
        .first()
    )
    if membership is None:
        raise Http404("no such tenant")
    return membership


@login_required
def topics(request: HttpRequest, tenant_slug: str) -> HttpResponse:
    membership = _membership(request, tenant_slug)
    query = request.GET.get("q", "").strip()
    rows = Topic.objects.filter(tenant=membership.tenant)
    if query:
        rows = rows.filter(name__icontains=query)
    topics = []
    for topic in rows:
        effective = effective_configs(topic.configs)
        topics.append(
            {
                "topic": topic,
                "retention_ms": effective["retention.ms"],
                "cleanup_policy": effective["cleanup.policy"],
            }
        )
    return render(
        request,
        "frontend/topics.html",
        {"tenant": membership.tenant, "role": membership.role, "topics": topics, "q": query},
    )
