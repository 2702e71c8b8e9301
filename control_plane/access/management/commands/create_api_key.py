"""``manage.py create_api_key <tenant> <service account>``: a key from the shell.

Creates the service account if it does not exist (granting ``--preset`` ACLs with it, as
the console and the REST API can), then an API key, and prints shell lines that set
``KEY`` and ``SECRET``, so ``eval "$(python manage.py create_api_key default app ...)"``
leaves them in the shell. The secret is printed this once and stored only hashed.
"""

from __future__ import annotations

import shlex
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from control_plane.access import presets
from control_plane.access import services as access_services
from control_plane.access.models import ServiceAccount
from control_plane.core.actor import Actor
from control_plane.core.errors import ServiceError
from control_plane.tenancy.models import Tenant


class Command(BaseCommand):
    help = "Create an API key (and its service account, with an ACL preset) from the shell."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="the tenant's slug, e.g. default")
        parser.add_argument("service_account", help="created if it does not exist")
        parser.add_argument("--preset", choices=presets.PRESET_CHOICES)
        parser.add_argument("--topic", default="", help="the preset's topic, prefix or *")
        parser.add_argument("--topic-pattern", default="literal", choices=["literal", "prefixed"])
        parser.add_argument("--group", default="", help="the consumer preset's group or prefix")
        parser.add_argument("--group-pattern", default="prefixed", choices=["literal", "prefixed"])
        parser.add_argument("--description", default="created with manage.py create_api_key")

    def handle(self, *args: Any, **o: Any) -> None:
        tenant = Tenant.objects.filter(slug=o["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {o['tenant']!r}")
        actor = Actor.system()
        try:
            sa = ServiceAccount.objects.filter(tenant=tenant, name=o["service_account"]).first()
            preset = None
            if o["preset"]:
                preset = presets.parse(
                    {
                        "preset": o["preset"],
                        "topic": o["topic"],
                        "topic_pattern": o["topic_pattern"],
                        "group": o["group"],
                        "group_pattern": o["group_pattern"],
                    }
                )
            if sa is None:
                sa, _ = presets.create_with_preset(
                    actor, tenant, name=o["service_account"], description="", preset=preset
                )
            elif preset is not None:
                presets.grant(actor, tenant, sa, preset)
            created = access_services.create_api_key(actor, sa, description=o["description"])
        except ServiceError as exc:
            raise CommandError(f"{exc.field or 'error'}: {exc.message}") from None
        self.stdout.write(
            f"# API key of {sa.principal} in tenant {tenant.slug}; the secret is shown once\n"
            f"KEY={shlex.quote(created.api_key.key_id)}\n"
            f"SECRET={shlex.quote(created.secret)}\n"
        )
