"""The console benchmark's steps inside Django: ``python -m bench.console_setup STEP``.

Run by :mod:`bench.console` in a child process with the environment of its metadata
store, as the steps of :mod:`bench.store` are; each step that answers prints one JSON line.

* ``owner --password P``: a user ``bench-owner`` (password P), owner of the ``default``
  tenant, whose partition quota is raised for the benchmark's topics;
* ``samples``: an hour of the samples the beat schedule takes each minute (topic offsets
  and sizes, behind the throughput chart and rates), then one real sampling pass of topics
  and lag;
* ``profile PATH``: where one page's time goes, in this process (Django's test client on
  the same database and brokers, signed in as ``bench-owner``): the top functions by
  cumulative time, as text.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from typing import Any

from bench.store import DEFAULT_TENANT, answer, setup_django

OWNER = "bench-owner"


def create_owner(password: str) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from control_plane.core.actor import Actor
    from control_plane.tenancy import services as tenancy
    from control_plane.tenancy.models import Role, Tenant

    tenant = Tenant.objects.get(slug=DEFAULT_TENANT)
    Tenant.objects.filter(pk=tenant.pk).update(max_partitions=1_000_000)
    user = get_user_model().objects.create_user(OWNER, password=password)
    tenancy.add_member(Actor.system(), tenant, user=user, role=Role.OWNER)
    return {"user": user.username}


def add_samples(minutes: int = 60) -> dict[str, Any]:
    from datetime import timedelta

    from django.utils import timezone

    from control_plane.catalog.models import Topic, TopicSample
    from control_plane.groups import lag, topic_samples

    now = timezone.now()
    rows = [
        TopicSample(
            topic=topic,
            at=now - timedelta(minutes=minutes - m),
            end_offset=m * 10,
            consumed=m * 9,
            size_bytes=m * 1000,
            produced_per_s=10 / 60 if m else None,
            consumed_per_s=9 / 60 if m else None,
        )
        for topic in Topic.objects.filter(tenant__slug=DEFAULT_TENANT)
        for m in range(minutes)
    ]
    TopicSample.objects.bulk_create(rows, batch_size=5000)
    topic_samples.sample_topics()
    lag.sample_lag()
    return {"samples": len(rows)}


def profile_page(path: str, fetches: int = 5, top: int = 45) -> str:
    """The cumulative-time profile of ``fetches`` fetches of ``path`` after two warm-ups."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(username=OWNER))
    for _ in range(2):
        client.get(path)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(fetches):
        status = client.get(path).status_code
        if status != 200:
            raise RuntimeError(f"{path} answered {status}")
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    owner = steps.add_parser("owner", help="an owner of the default tenant")
    owner.add_argument("--password", required=True)
    steps.add_parser("samples", help="an hour of topic samples, then real samples")
    profile = steps.add_parser("profile", help="profile one page")
    profile.add_argument("path")
    args = parser.parse_args(argv)
    setup_django()
    if args.step == "owner":
        answer(create_owner(args.password))
    elif args.step == "samples":
        answer(add_samples())
    else:
        print(profile_page(args.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
