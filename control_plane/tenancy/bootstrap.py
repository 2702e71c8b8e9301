"""First-run setup for ``manage.py up``: an operator account and a ``default`` tenant."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from control_plane.core.actor import Actor
from control_plane.tenancy.models import Tenant
from control_plane.tenancy.services import create_tenant

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Bootstrap:
    username: str
    password: str | None  # set only when the account was created by this call
    tenant_slug: str
    tenant_created: bool


@transaction.atomic
def ensure_first_admin(username: str = "admin") -> Bootstrap:
    """Create the admin user and the default tenant if missing; idempotent."""
    user_model = get_user_model()
    password = None
    user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
    if user is None:
        password = secrets.token_urlsafe(18)
        user = user_model.objects.create_superuser(username=username, email="", password=password)
    tenant_created = False
    if not Tenant.objects.filter(slug=DEFAULT_TENANT).exists():
        create_tenant(Actor.system(), slug=DEFAULT_TENANT, name="Default", owner=user)
        tenant_created = True
    return Bootstrap(username, password, DEFAULT_TENANT, tenant_created)
