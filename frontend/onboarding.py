"""Get started: a new tenant's first topic and a key that may produce to it and consume
it, in one step, ending on the key's page with copyable client configurations (kcat,
confluent-kafka, Java properties, Spark). Everything it makes is ordinary: a topic, a
service account with the ``producer`` and ``consumer`` presets' ACLs, and an API key,
each audited and managed on its own page afterwards."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse
from django.views.decorators.http import require_http_methods

from control_plane.access import presets
from control_plane.access import services as access_services
from control_plane.access.models import ServiceAccount
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import Topic
from control_plane.core.errors import ServiceError
from control_plane.tenancy.models import Role
from frontend.access import key_created_page
from frontend.console import Page, form_errors, member_view

ACCOUNT = "quickstart"


def _account_name(page: Page) -> str:
    taken = set(
        ServiceAccount.objects.filter(tenant=page.tenant, name__startswith=ACCOUNT).values_list(
            "name", flat=True
        )
    )
    if ACCOUNT not in taken:
        return ACCOUNT
    return next(f"{ACCOUNT}-{n}" for n in range(2, len(taken) + 3) if f"{ACCOUNT}-{n}" not in taken)


@require_http_methods(["GET", "HEAD", "POST"])
@member_view("overview", role=Role.ADMIN)
def get_started(page: Page) -> HttpResponse:
    form = {"topic": page.request.POST.get("topic", "orders").strip()}
    errors: dict[str, str] = {}
    if page.request.method == "POST":
        try:
            with transaction.atomic():
                topic = Topic.objects.filter(tenant=page.tenant, name=form["topic"]).first()
                if topic is None:
                    topic = catalog_services.create_topic(
                        page.actor,
                        page.tenant,
                        name=form["topic"],
                        partition_count=page.tenant.default_partitions
                        or settings.MILLRACE_DEFAULT_PARTITIONS,
                    )
                name = _account_name(page)
                sa, _ = presets.create_with_preset(
                    page.actor,
                    page.tenant,
                    name=name,
                    description=f"made by Get started for topic {topic.name}",
                    preset=presets.Preset("producer", topic.name),
                )
                presets.grant(
                    page.actor, page.tenant, sa, presets.Preset("consumer", topic.name, group=name)
                )
                created = access_services.create_api_key(page.actor, sa, description="Get started")
        except ServiceError as exc:
            errors = form_errors(exc, {"name": "topic"})
            if "topic" not in errors:  # about the account, ACLs or key: the whole form
                errors = {"form": next(iter(errors.values()))}
        else:
            return key_created_page(
                page,
                created,
                topic=topic.name,
                onboarding={"topic": topic.name, "group_prefix": name},
            )
    return page.render(
        "frontend/get_started.html",
        {"form": form, "errors": errors},
        status=400 if errors else 200,
    )
