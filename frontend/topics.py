"""Topic pages: the list, create, the detail page (partitions and configuration), edit
configs, add partitions, and delete with a typed confirmation.

Every change goes through ``control_plane.catalog.services`` as the REST API does, so
validation messages, audit events and broker notifications are the API's own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from control_plane.access import policy
from control_plane.catalog import services as catalog_services
from control_plane.catalog import usage
from control_plane.catalog.models import Topic
from control_plane.core.errors import ServiceError
from control_plane.groups.lag import Brokers
from data_plane.topic_config import TOPIC_CONFIGS, effective_configs
from frontend.console import Page, form_errors, member_view
from frontend.snippets import client_snippets
from frontend.units import DURATION_UNITS, duration_ms, whole_number

NEEDS = policy.TOPIC_NEEDS

# What a broker's error for one partition means to someone looking at the table.
PARTITION_ERRORS = {
    "UNKNOWN_TOPIC_OR_PARTITION": "not on its leader yet",
    "LEADER_NOT_AVAILABLE": "no leader",
    "NOT_LEADER_OR_FOLLOWER": "leader moving",
}
# For this long after partitions were created (with the topic, or added), the errors above
# mean the leader has not opened them yet: shown as "starting", not as a failure.
STARTING_SECONDS = 30
TOPICS_PER_PAGE = 100


def topic_or_404(page: Page, name: str) -> Topic:
    return page.owned(Topic.objects.all(), "topic", name=name)


def _back_to(page: Page, topic: Topic) -> HttpResponse:
    return redirect("frontend:topic", tenant_slug=page.tenant.slug, name=topic.name)


@member_view("topics")
def topic_list(page: Page) -> HttpResponse:
    query = page.request.GET.get("q", "").strip()
    matching = Topic.objects.filter(tenant=page.tenant).order_by("name")
    if query:
        matching = matching.filter(name__icontains=query)
    # A page of topics at a time: the brokers and the samples are asked about those only.
    pages = Paginator(matching, TOPICS_PER_PAGE)
    shown = pages.get_page(page.request.GET.get("page"))
    rows = list(shown.object_list)
    sizes, sizes_failure = usage.topic_sizes(page.tenant, rows)
    rates = usage.recent_rates(page.tenant, topics=rows)
    topics = []
    for topic in rows:
        effective = effective_configs(topic.configs)
        topics.append(
            {
                "topic": topic,
                "retention_ms": effective["retention.ms"],
                "cleanup_policy": effective["cleanup.policy"],
                "size": sizes.get(topic.name),
                "rate": rates.get(topic.name),
            }
        )
    return page.render(
        "frontend/topics.html",
        {
            "topics": topics,
            "q": query,
            "sizes_failure": sizes_failure,
            "shown": shown,
            "pager_query": urlencode({"q": query}) + "&" if query else "",
        },
        partial="frontend/partials/topic_rows.html",
    )


@member_view("topics", role=NEEDS["create"].role)
def topic_create(page: Page) -> HttpResponse:
    form: dict[str, Any] = {
        "name": "",
        "partitions": "3",
        "replication_factor": str(catalog_services.default_replication_factor()),
        "retention_amount": "7",
        "retention_unit": "d",
        "cleanup_policy": "delete",
    }
    errors: dict[str, str] = {}
    if page.request.method == "POST":
        form.update({k: page.request.POST.get(k, "").strip() for k in form})
        try:
            configs: dict[str, object] = {
                "retention.ms": duration_ms(
                    form["retention_amount"], form["retention_unit"], "retention"
                ),
                "cleanup.policy": form["cleanup_policy"],
            }
            topic = catalog_services.create_topic(
                page.actor,
                page.tenant,
                name=form["name"],
                partition_count=whole_number(form["partitions"], "partitions"),
                replication_factor=whole_number(form["replication_factor"], "replication_factor"),
                configs=configs,
            )
        except ServiceError as exc:
            errors = form_errors(
                exc,
                {
                    "partition_count": "partitions",
                    "configs.retention.ms": "retention",
                    "configs.cleanup.policy": "cleanup_policy",
                },
            )
        else:
            messages.success(page.request, f"Topic {topic.name} created.")
            return _back_to(page, topic)
    return page.render(
        "frontend/topic_create.html",
        {
            "form": form,
            "errors": errors,
            "units": [*DURATION_UNITS, "forever"],
            "cleanup_policies": TOPIC_CONFIGS["cleanup.policy"].choices,
        },
        status=400 if errors else 200,
    )


def _partitions(page: Page, topic: Topic) -> tuple[list[dict[str, Any]], str | None]:
    """Rows of the partitions table: metadata, and the log's offsets from the brokers."""
    rows = list(topic.partitions.all())
    tps = [(topic.name, p.index) for p in rows]
    with Brokers(page.tenant) as brokers:
        state = brokers.log_state(tps, {})
    sizes = usage.partition_sizes(page.tenant, topic) if state.failure is None else {}
    young = (timezone.now() - topic.updated_at).total_seconds() < STARTING_SECONDS
    out = []
    for p in rows:
        tp = (topic.name, p.index)
        start, end = state.start.get(tp), state.end.get(tp)
        code = state.errors.get(tp)
        starting = young and code in PARTITION_ERRORS
        out.append(
            {
                "index": p.index,
                "leader": p.leader,
                "replicas": p.replicas,
                "isr": p.isr,
                "under_replicated": len(p.isr) < len(p.replicas),
                "offline": p.leader is None or p.leader < 0,
                "start": start,
                "end": end,
                "records": end - start if start is not None and end is not None else None,
                "size": sizes.get(p.index),
                "starting": starting,
                "error": None if starting else PARTITION_ERRORS.get(code or "", code),
            }
        )
    return out, state.failure


def _configs(topic: Topic, submitted: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The configs table's rows; ``submitted`` (a refused edit) shows what was typed."""
    effective = effective_configs(topic.configs)
    rows = []
    for name, definition in TOPIC_CONFIGS.items():
        value = effective[name]
        shown = definition.to_kafka_string(value)
        rows.append(
            {
                "name": name,
                "id": name.replace(".", "-"),  # for the error's element id
                "value": (submitted or {}).get(name, shown),
                "default": definition.to_kafka_string(definition.default),
                "overridden": name in topic.configs,
                "doc": definition.doc,
                "choices": definition.choices
                or (("true", "false") if definition.kind is bool else None),
            }
        )
    return rows


@member_view("topics")
def topic_detail(page: Page, name: str) -> HttpResponse:
    return _detail(page, topic_or_404(page, name))


def _detail(
    page: Page,
    topic: Topic,
    *,
    submitted: dict[str, str] | None = None,
    partitions_typed: str | None = None,
    errors: dict[str, str] | None = None,
) -> HttpResponse:
    partitions, failure = _partitions(page, topic)
    listener, snippets = client_snippets(page.request, page.tenant.slug, topic=topic.name)
    return page.render(
        "frontend/topic_detail.html",
        {
            "listener": listener,
            "snippets": snippets,
            "topic": topic,
            "partitions": partitions,
            "offsets_failure": failure,
            "configs": _configs(topic, submitted),
            "total_records": sum(p["records"] or 0 for p in partitions),
            "retention": effective_configs(topic.configs)["retention.ms"],
            "errors": errors or {},
            "partitions_value": partitions_typed,
        },
        status=400 if errors else 200,
    )


@require_POST
@member_view("topics", role=NEEDS["alter_configs"].role)
def topic_configs(page: Page, name: str) -> HttpResponse:
    """Set the configs whose submitted value differs; ``reset:<name>`` drops an override."""
    topic = topic_or_404(page, name)
    effective = effective_configs(topic.configs)
    changes: dict[str, object | None] = {}
    for key, definition in TOPIC_CONFIGS.items():
        raw = page.request.POST.get(key)
        if page.request.POST.get(f"reset:{key}"):
            if key in topic.configs:
                changes[key] = None
        elif raw is not None and raw.strip() != definition.to_kafka_string(effective[key]):
            changes[key] = raw.strip()
    if not changes:
        messages.info(page.request, "Nothing changed.")
        return _back_to(page, topic)
    try:
        catalog_services.alter_topic_configs(page.actor, topic, changes)
    except ServiceError as exc:
        # Shown again with what was typed, the error beside its config; nothing was saved.
        submitted = {
            k: page.request.POST[k].strip() for k in TOPIC_CONFIGS if k in page.request.POST
        }
        field = (exc.field or "").removeprefix("configs.")
        errors = {field if field in TOPIC_CONFIGS else "configs": exc.message}
        return _detail(page, topic, submitted=submitted, errors=errors)
    messages.success(page.request, f"Saved {', '.join(sorted(changes))}.")
    return _back_to(page, topic)


@require_POST
@member_view("topics", role=NEEDS["add_partitions"].role)
def topic_add_partitions(page: Page, name: str) -> HttpResponse:
    topic = topic_or_404(page, name)
    raw = page.request.POST.get("partitions", "")
    try:
        catalog_services.add_partitions(
            page.actor, topic, partition_count=whole_number(raw, "partitions")
        )
    except ServiceError as exc:
        # The page again, the number as typed and the reason beside it; nothing changed.
        topic.refresh_from_db()
        return _detail(page, topic, partitions_typed=raw, errors={"partitions": exc.message})
    messages.success(page.request, f"{topic.name} now has {raw.strip()} partitions.")
    return _back_to(page, topic)


@require_POST
@member_view("topics", role=NEEDS["destroy"].role)
def topic_delete(page: Page, name: str) -> HttpResponse:
    topic = topic_or_404(page, name)
    if page.request.POST.get("confirm", "") != topic.name:
        messages.error(page.request, f"Type the topic's name ({topic.name}) to delete it.")
        return _back_to(page, topic)
    catalog_services.delete_topic(page.actor, topic)
    messages.success(page.request, f"Topic {topic.name} deleted.")
    return redirect("frontend:topics", tenant_slug=page.tenant.slug)
