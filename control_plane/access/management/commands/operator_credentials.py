"""``manage.py operator_credentials <user> <tenant>``: SASL credentials for an operator.

An operator (an active staff user) acting in one tenant over the Kafka protocol, e.g. to
create topics with a manual replica assignment. The password is derived from
``MILLRACE_INTERNAL_SECRET``, so only someone who can run this command on the control
plane can obtain one; it stops working when the user is deactivated or loses staff status,
or when the secret is rotated.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from control_plane.tenancy.models import Tenant
from data_plane import internal_auth


class Command(BaseCommand):
    help = "Print Kafka client settings for an operator (a staff user) acting in one tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="an active staff user of the console")
        parser.add_argument("tenant", help="the tenant's slug")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None or not user.is_active or not user.is_staff:
            raise CommandError(f"{options['username']!r} is not an active staff user")
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        name = internal_auth.operator_username(tenant.slug, user.pk)
        secret = internal_auth.operator_password(settings.MILLRACE_INTERNAL_SECRET, name)
        self.stdout.write(
            "# Operator credentials: full topic administration in tenant "
            f"{tenant.slug!r}, as {user.get_username()!r}. Keep them secret.\n"
            "security.protocol=SASL_PLAINTEXT\n"
            f"sasl.mechanism={internal_auth.MECHANISM}\n"
            f"sasl.username={name}\n"
            f"sasl.password={secret}\n"
        )
