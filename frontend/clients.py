"""Client versions: which client software, at which Kafka request versions, the tenant's
applications connect with (reported by the brokers every
``MILLRACE_BROKER_CLIENT_REPORT_SECONDS``), and who must upgrade: versions this broker
refused, and versions it serves that Kafka 4 refuses (KIP-896). Read-only, for every
member (``policy.CLIENT_VERSION_NEEDS``)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse

from control_plane.access import policy
from control_plane.catalog import client_versions
from frontend.console import Page, member_view

NEEDS = policy.CLIENT_VERSION_NEEDS


@member_view("clients", role=NEEDS["list"].role)
def client_list(page: Page) -> HttpResponse:
    found = client_versions.identities(page.tenant)
    return page.render(
        "frontend/clients.html",
        {
            "clients": found,
            "must_upgrade": sum(1 for c in found if c.must_upgrade),
            "report_seconds": settings.MILLRACE_BROKER_CLIENT_REPORT_SECONDS,
            "keep_days": settings.MILLRACE_CLIENT_VERSIONS_KEEP_DAYS,
        },
    )
