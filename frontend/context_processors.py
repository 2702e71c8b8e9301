"""Template context for the console: the tenants the signed-in user belongs to."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from control_plane.tenancy.models import Membership


def tenants(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_memberships": []}
    memberships = Membership.objects.filter(user=user).select_related("tenant")
    return {"nav_memberships": list(memberships)}
