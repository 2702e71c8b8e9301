"""The metadata benchmark's steps inside Django: ``python -m bench.metadata_setup STEP``.

Run by :mod:`bench.metadata` in a child process (:func:`bench.common.run_step`) against
the store its environment names. Every change goes through the control plane's services,
as the REST API makes it, so brokers learn it the way they learn any change.

Steps (each answers one JSON line):

* ``seed --first I --count N --partitions P``: tenants ``t<I>`` .. ``t<I+N-1>``, each with
  one topic ``events`` of P partitions (the deployment's replication factor);
* ``credentials --tenant SLUG``: a service account of the tenant allowed everything, and
  an API key of it;
* ``tick --count N [--analyze]``: ``controller_tick()`` N times (after ``ANALYZE``, the
  planner's statistics as autovacuum keeps them); each tick's milliseconds.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.store import answer, credentials, setup_django


def tenant_slug(index: int) -> str:
    return f"t{index:05d}"


def seed(first: int, count: int, partitions: int) -> dict[str, Any]:
    from control_plane.catalog import services as catalog
    from control_plane.core.actor import Actor
    from control_plane.tenancy import services as tenancy

    actor = Actor.system()
    started = time.monotonic()
    for index in range(first, first + count):
        slug = tenant_slug(index)
        tenant = tenancy.create_tenant(
            actor,
            slug=slug,
            name=slug,
            limits={"max_partitions": max(partitions * 2, 1000)},
        )
        catalog.create_topic(actor, tenant, name="events", partition_count=partitions)
    return {"tenants": count, "partitions": count * partitions, "seconds": _since(started)}


def ticks(count: int, analyze: bool = False) -> dict[str, Any]:
    from django.db import connection

    from control_plane.controller.services import controller_tick

    if analyze:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    controller_tick()  # warm: connections, imports
    took = []
    for _ in range(count):
        started = time.perf_counter()
        controller_tick()
        took.append(round((time.perf_counter() - started) * 1000, 2))
    return {"tick_ms": took}


def _since(started: float) -> float:
    return round(time.monotonic() - started, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    s = steps.add_parser("seed", help="tenants, each with one topic")
    s.add_argument("--first", type=int, required=True)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--partitions", type=int, required=True)
    c = steps.add_parser("credentials", help="an API key allowed everything in a tenant")
    c.add_argument("--tenant", required=True)
    t = steps.add_parser("tick", help="controller_tick() timings")
    t.add_argument("--count", type=int, default=20)
    t.add_argument("--analyze", action="store_true", help="ANALYZE the database first")
    args = parser.parse_args(argv)
    setup_django()
    if args.step == "seed":
        answer(seed(args.first, args.count, args.partitions))
    elif args.step == "credentials":
        answer(credentials("bench-metadata", args.tenant))
    else:
        answer(ticks(args.count, args.analyze))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
