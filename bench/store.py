"""The benchmarks' steps inside Django: ``python -m bench.store STEP [...]``.

A benchmark's own process never imports Django: it points child processes at a metadata
store through their environment (``DATABASE_URL``, ``MILLRACE_DATA_DIR``, ...), and runs
these steps in such a child (:func:`bench.common.run_step`), which sets Django up from
that environment with ``control_plane.settings``. A step that answers prints one JSON line
on standard output; anything Django logs goes to standard error.

Steps:

* ``prepare``: the first admin and the ``default`` tenant (``ensure_first_admin``, as
  ``manage.py up`` makes them), with the tenant's quotas raised out of a benchmark's way;
* ``credentials NAME``: a service account NAME of the default tenant allowed everything,
  and a new API key of it (``{"username", "password"}``);
* ``settings``: the settings the benchmarks report beside their figures;
* ``controller --lifetime S``: the body of the Celery beat entry "controller-tick", once a
  second, until ``S`` seconds have passed or the parent process is gone (no answer; the
  controller logs as a beat worker would).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

DEFAULT_TENANT = "default"


def setup_django() -> None:
    """Configure Django from this process's environment (as ``manage.py`` does)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    django.setup()


def answer(found: dict[str, Any]) -> None:
    """The one JSON line a step answers with (:func:`bench.common.run_step` reads it)."""
    print(json.dumps(found), flush=True)


def prepare() -> dict[str, Any]:
    """The first admin and the default tenant, with quotas no benchmark reaches."""
    from control_plane.tenancy.bootstrap import ensure_first_admin
    from control_plane.tenancy.models import Tenant

    ensure_first_admin()
    raised = Tenant.objects.filter(slug=DEFAULT_TENANT).update(
        produce_byte_rate=2**40,
        fetch_byte_rate=2**40,
        max_partitions=100_000,
        max_storage_bytes=2**50,
    )
    return {"tenants": raised}


def credentials(name: str, tenant_slug: str = DEFAULT_TENANT) -> dict[str, str]:
    """A new service account ``name`` of the tenant (the default one unless given) allowed
    every operation on the cluster, every topic, every group and every transactional id;
    the id and secret of a new API key of it."""
    from control_plane.access import services as access
    from control_plane.core.actor import Actor
    from control_plane.tenancy.models import Tenant

    actor, tenant = Actor.system(), Tenant.objects.get(slug=tenant_slug)
    account = access.create_service_account(actor, tenant, name=name)
    everything = (
        ("cluster", "kafka-cluster"),
        ("topic", "*"),
        ("group", "*"),
        ("transactional_id", "*"),
    )
    for kind, resource in everything:
        access.create_acl(
            actor,
            tenant,
            principal=account.principal,
            resource_type=kind,
            pattern_type="literal",
            resource_name=resource,
            operation="all",
            permission="allow",
        )
    key = access.create_api_key(actor, account)
    return {"username": key.api_key.key_id, "password": key.secret}


def bench_settings() -> dict[str, Any]:
    """The settings the benchmarks report (the environment they run with decides them)."""
    from django.conf import settings

    return {
        "lease_seconds": settings.MILLRACE_BROKER_LEASE_SECONDS,
        "replica_lag_time_max_ms": settings.MILLRACE_REPLICA_LAG_TIME_MAX_MS,
        "replica_fetch_wait_ms": settings.MILLRACE_REPLICA_FETCH_WAIT_MS,
        "initial_rebalance_delay_ms": settings.MILLRACE_GROUP_INITIAL_REBALANCE_DELAY_MS,
        "min_session_timeout_ms": settings.MILLRACE_GROUP_MIN_SESSION_TIMEOUT_MS,
        "engine": settings.DATABASES["default"]["ENGINE"],
    }


def run_controller(lifetime: float) -> None:
    """``controller_tick()`` once a second, whatever a tick takes, as Celery beat runs it;
    until ``lifetime`` seconds have passed or the process that started this one is gone."""
    from django.db import connection

    from control_plane.controller.services import controller_tick

    parent, end, due = os.getppid(), time.monotonic() + lifetime, time.monotonic()
    while time.monotonic() < end and os.getppid() == parent:
        try:
            controller_tick()
        except Exception:
            logging.getLogger("millrace.controller").exception("tick failed")
            connection.close()
        due = max(due + 1.0, time.monotonic())
        time.sleep(max(0.0, due - time.monotonic()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("prepare", help="the first admin and the default tenant, quotas raised")
    named = steps.add_parser("credentials", help="a service account allowed everything")
    named.add_argument("name")
    steps.add_parser("settings", help="the settings the benchmarks report")
    controller = steps.add_parser("controller", help="controller_tick() once a second")
    controller.add_argument("--lifetime", type=float, required=True, help="seconds")
    args = parser.parse_args(argv)
    setup_django()
    if args.step == "prepare":
        answer(prepare())
    elif args.step == "credentials":
        answer(credentials(args.name))
    elif args.step == "settings":
        answer(bench_settings())
    else:
        run_controller(args.lifetime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
