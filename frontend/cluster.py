"""Cluster pages for operators (staff users): brokers, partition health, reassignments in
progress, and the controller's actions (decommission, recommission, rebalance, reassign or
cancel one partition), each previewed before it runs. The same services as the operators' REST API
(``control_plane.api.cluster``) do the work, with the same audit events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from control_plane.api.cluster import partition_status
from control_plane.catalog import client_versions
from control_plane.catalog.models import Broker, Partition
from control_plane.controller import reassign
from control_plane.core.actor import Actor
from control_plane.core.errors import InvalidInput, NotFound, ServiceError
from control_plane.core.http import client_ip

View = Callable[..., HttpResponse]


def operator_view(view: View) -> View:
    @login_required
    def wrapper(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("the cluster pages are for operators")
        return view(request, **kwargs)

    wrapper.__name__ = view.__name__
    wrapper.__doc__ = view.__doc__
    return wrapper


def _actor(request: HttpRequest) -> Actor:
    return Actor(user=request.user, source_ip=client_ip(request))


def _page(request: HttpRequest, template: str, context: dict[str, Any]) -> HttpResponse:
    return render(request, template, {"section": "cluster", **context})


@operator_view
def cluster(request: HttpRequest) -> HttpResponse:
    partitions = list(Partition.objects.select_related("topic__tenant"))
    leaders: Counter[int] = Counter()
    replicas: Counter[int] = Counter()
    status: Counter[str] = Counter()
    unhealthy = []
    moving = []
    for p in partitions:
        if p.leader is not None:
            leaders[p.leader] += 1
        replicas.update(p.replicas)
        state = partition_status(p)
        status[state] += 1
        if state != "online":
            unhealthy.append({"partition": p, "status": state})
        if reassign.is_reassigning(p):
            moving.append(p)
    live = set(
        Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS).values_list("id", flat=True)
    )
    brokers = [
        {
            "broker": b,
            "live": b.id in live,
            "leaders": leaders.get(b.id, 0),
            "replicas": replicas.get(b.id, 0),
        }
        for b in Broker.objects.all()
    ]
    return _page(
        request,
        "frontend/cluster.html",
        {
            "brokers": brokers,
            "live_count": len(live),
            "status": {s: status.get(s, 0) for s in ("online", "under_replicated", "offline")},
            "unassigned": status.get("unassigned", 0),
            "unhealthy": unhealthy[:200],
            "moving": moving[:200],
            "partition_count": len(partitions),
            "to_upgrade": client_versions.to_upgrade(),
        },
    )


def _preview(request: HttpRequest, title: str, moves: list[reassign.Move], action: str) -> Any:
    return _page(
        request,
        "frontend/cluster_plan.html",
        {"title": title, "moves": moves, "action": action},
    )


@require_POST
@operator_view
def broker_action(request: HttpRequest, broker_id: int) -> HttpResponse:
    """``decommission`` (preview, then ``confirm``) or ``recommission`` one broker."""
    what = request.POST.get("action", "")
    try:
        if what == "recommission":
            reassign.recommission_broker(broker_id, _actor(request))
            messages.success(request, f"Broker {broker_id} may receive replicas again.")
        elif what == "decommission":
            confirmed = bool(request.POST.get("confirm"))
            moves = reassign.decommission_broker(broker_id, _actor(request), dry_run=not confirmed)
            if not confirmed:
                return _preview(request, f"Decommission broker {broker_id}", moves, request.path)
            messages.success(
                request, f"Decommissioning broker {broker_id}: moving {len(moves)} replica(s)."
            )
        else:
            messages.error(request, "Choose decommission or recommission.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("frontend:cluster")


@require_POST
@operator_view
def rebalance(request: HttpRequest) -> HttpResponse:
    """Spread replicas evenly over the eligible brokers: preview, then ``confirm``."""
    confirmed = bool(request.POST.get("confirm"))
    try:
        moves = reassign.rebalance(_actor(request), dry_run=not confirmed)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return redirect("frontend:cluster")
    if not confirmed:
        return _preview(request, "Rebalance replicas", moves, request.path)
    messages.success(request, f"Rebalancing: moving {len(moves)} partition(s).")
    return redirect("frontend:cluster")


def _partition_named(form: dict[str, str]) -> Partition:
    try:
        index = int(form["partition"])
    except ValueError:
        raise InvalidInput("the partition is a number", field="partition") from None
    row = (
        Partition.objects.select_related("topic__tenant")
        .filter(topic__tenant__slug=form["tenant"], topic__name=form["topic"], index=index)
        .first()
    )
    if row is None:
        raise NotFound(f"no partition {form['tenant']}/{form['topic']}-{form['partition']}")
    return row


def _broker_ids(raw: str) -> list[int]:
    try:
        return [int(part) for part in raw.replace(" ", "").split(",") if part]
    except ValueError:
        raise InvalidInput(
            "replicas are broker ids separated by commas", field="replicas"
        ) from None


@require_POST
@operator_view
def reassign_partition(request: HttpRequest) -> HttpResponse:
    """Move one partition to new replicas (preview, then ``confirm``), or ``cancel`` a move."""
    form = {
        k: request.POST.get(k, "").strip() for k in ("tenant", "topic", "partition", "replicas")
    }
    try:
        row = _partition_named(form)
        if request.POST.get("action") == "cancel":
            reassign.cancel(row, _actor(request))
            messages.success(request, f"Reassignment of {row} cancelled.")
            return redirect("frontend:cluster")
        target = reassign.validate_target(
            row, _broker_ids(form["replicas"]), reassign.eligible_broker_ids()
        )
        if not request.POST.get("confirm"):
            return _page(
                request,
                "frontend/cluster_plan.html",
                {
                    "title": f"Reassign {row.topic.name}-{row.index}",
                    "moves": [reassign.Move(row, target)],
                    "action": request.path,
                    "fields": {**form, "replicas": ",".join(map(str, target))},
                },
            )
        if reassign.reassign(row, target, _actor(request)) is None:
            messages.info(request, f"{row} already has those replicas, in that order.")
        else:
            messages.success(request, f"Moving {row} to brokers {', '.join(map(str, target))}.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("frontend:cluster")
