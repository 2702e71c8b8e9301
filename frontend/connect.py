"""Connect pages: the tenant's Connect cluster (``connect-cluster``, the one the REST API
serves): the connectors with their states, create one from a plugin's form (or a config
pasted as JSON or properties), a connector's config (secrets masked), status, offsets,
active topics and dead-letter queue, and its actions.

The console reads and writes the cluster's topics as the signed-in member (the console
principal, whose rights the broker derives from the role), and every change is a function
of ``control_plane.connect.services``, as in the REST API: the same validation, the same
audit events. Viewers look; developers and up change (the REST API's ``READ`` and
``WRITE``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from control_plane.access.models import ApiKey
from control_plane.catalog.models import Topic
from control_plane.connect import services
from control_plane.connect.services import Cluster, ConnectError, InvalidConfig
from control_plane.core.errors import ServiceError
from control_plane.groups.lag import Brokers
from control_plane.streams.kafka import Delegation
from data_plane.connect.config import ConfigException
from data_plane.connect.plugins import PLUGINS, plugin_name
from data_plane.connect.properties import parse_properties
from data_plane.connect.worker import SINK_CONFIG
from frontend.console import Page, member_view
from frontend.snippets import MECHANISM, listener

SECTION = "connect"
LOOK = services.READ.role
CHANGE = services.WRITE.role
MASK = "••••"
DLQ = "errors.deadletterqueue.topic.name"
# Shown in the console's colours: running is fine, failed is not, the rest wait.
BADGES = {"RUNNING": "ok", "FAILED": "bad", "PAUSED": "warn", "STOPPED": "warn"}
# Keys the form asks for on its own (the name) or knows from the plugin chosen.
FORM_KEYS = ("name", "connector.class")
FORM_ERRORS = ("name", "form", "extra", "plugin")  # shown where they belong, not as keys


def _who(page: Page) -> Delegation:
    return Delegation.console(page.tenant.slug, page.request.user.pk)


def _failure(exc: ConnectError | ServiceError) -> str:
    return exc.message


def _back_to(page: Page, name: str) -> HttpResponse:
    return redirect("frontend:connector", tenant_slug=page.tenant.slug, name=name)


def _state(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "badge": BADGES.get(entry.get("state", ""), "")}


def _short(plugin: str) -> str:
    return plugin.rsplit(".", 1)[-1]


# --- the list --------------------------------------------------------------------------------


def _rows(cluster: Cluster) -> list[dict[str, Any]] | None:
    """A row per connector; None when the cluster has no topics yet (no worker ran)."""
    with cluster.configs() as store:
        snapshot = store.snapshot() if store is not None else None
    if snapshot is None:
        return None
    rows = []
    with cluster.statuses() as statuses:
        for name in sorted(snapshot.connectors):
            config = snapshot.connectors[name]
            status = services.connector_status(
                name, config, statuses, len(snapshot.tasks.get(name, []))
            )
            states = [t["state"] for t in status["tasks"]]
            rows.append(
                {
                    "name": name,
                    "type": status["type"],
                    "plugin": _short(config.get("connector.class", "")),
                    "connector": _state(status["connector"]),
                    "target": snapshot.target_state(name),
                    "tasks": len(states),
                    "running": states.count("RUNNING"),
                    "failed": states.count("FAILED"),
                }
            )
    return rows


def worker_properties() -> str:
    """A distributed worker's config for the tenant's cluster, the key left to fill in."""
    where = listener()
    return (
        f"bootstrap.servers={where.bootstrap or '<bootstrap servers>'}\n"
        f"security.protocol={where.protocol}\n"
        f"sasl.mechanism={MECHANISM}\n"
        "sasl.username=<API key id>\n"
        "sasl.password=<API secret>\n"
        f"group.id={services.GROUP}\n"
        f"config.storage.topic={services.CONFIGS}\n"
        f"offset.storage.topic={services.OFFSETS}\n"
        f"status.storage.topic={services.STATUS}\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
    )


@member_view(SECTION, role=LOOK)
def connector_list(page: Page) -> HttpResponse:
    rows: list[dict[str, Any]] | None = []
    failure = None
    try:
        rows = _rows(Cluster(_who(page)))
    except (ConnectError, ServiceError) as exc:
        failure = _failure(exc)
    return page.render(
        "frontend/connect.html",
        {
            "connectors": rows or [],
            "no_cluster": rows is None,
            "failure": failure,
            "worker_properties": worker_properties(),
        },
    )


# --- create ----------------------------------------------------------------------------------


def _plugins() -> list[dict[str, str]]:
    return [
        {
            "class": full,
            "alias": _short(full).removesuffix("Connector"),
            "type": kind.kind,
            "version": kind.version,
            "doc": kind.doc,
        }
        for full, kind in sorted(PLUGINS.items(), key=lambda item: (item[1].kind, item[0]))
    ]


KEY_FIELDS = (services.API_KEY, services.API_SECRET)


def _api_keys(page: Page) -> tuple[str, ...]:
    """The tenant's active keys, as a connector may run as them (``kafka.api.key``)."""
    return tuple(
        ApiKey.objects.active()
        .filter(tenant=page.tenant)
        .order_by("service_account__name", "key_id")
        .values_list("key_id", flat=True)
    )


def _fields(plugin: str, api_keys: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The plugin's keys as form fields: its own, a sink's topics, then every connector's."""
    kind = PLUGINS[plugin]
    own = set(kind.config_def.keys) | (set(SINK_CONFIG.keys) if kind.kind == "sink" else set())
    fields = []
    for definition in services.plugin_keys(plugin):
        name = definition["name"]
        if name in FORM_KEYS:
            continue
        kind_name = definition["type"]
        fields.append(
            {
                "name": name,
                "id": name.replace(".", "-"),
                "type": kind_name,
                "required": definition["required"],
                "default": definition["default_value"],
                "doc": definition["documentation"],
                "password": kind_name == "PASSWORD" or services.is_secret(name),
                "choices": ("true", "false")
                if kind_name == "BOOLEAN"
                else api_keys
                if name == services.API_KEY
                else None,
                "own": name in own,
            }
        )
    return fields


def parse_config_text(text: str) -> tuple[dict[str, str], str | None]:
    """A pasted config: JSON (Kafka Connect's ``{"name", "config"}`` or a flat map) or Java
    properties; (the config, the name it gives if any)."""
    text = text.strip()
    if not text:
        return {}, None
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConnectError(400, f"not valid JSON: {exc}") from exc
        name = data.get("name") if isinstance(data.get("name"), str) else None
        if isinstance(data.get("config"), dict):
            data = data["config"]
        return services.string_config(data), name
    config = parse_properties(text)
    return config, config.get("name")


def _joined(errors: dict[str, list[str]]) -> dict[str, str]:
    return {key: "; ".join(found) for key, found in errors.items()}


@require_http_methods(["GET", "HEAD", "POST"])
@member_view(SECTION, role=CHANGE)
def connector_create(page: Page) -> HttpResponse:
    """``?plugin=`` picks the form; without one, the plugins and a paste-a-config form."""
    source = page.request.POST if page.request.method == "POST" else page.request.GET
    chosen = source.get("plugin", "").strip()
    errors: dict[str, str] = {}
    plugin = None
    if chosen:
        try:
            plugin = plugin_name(chosen)
        except ConfigException as exc:
            errors["plugin"] = exc.message
    fields = _fields(plugin, _api_keys(page)) if plugin else []
    form = {"name": "", "extra": ""}
    values: dict[str, str] = {}
    if page.request.method == "POST" and not errors:
        post = page.request.POST
        form = {"name": post.get("name", "").strip(), "extra": post.get("extra", "")}
        for field in fields:
            raw = post.get(f"config:{field['name']}", "")
            value = raw if field["password"] else raw.strip()
            if value.strip():
                values[field["name"]] = value
        config = {"connector.class": plugin} if plugin else {}
        config.update(values)
        name: str | None = form["name"]
        try:
            pasted, pasted_name = parse_config_text(form["extra"])
        except ConnectError as exc:
            errors["extra"] = exc.message
        else:
            config.update(pasted)
            name = form["name"] or pasted_name
            config.pop("name", None)
        if not errors:
            try:
                name = services.connector_name(name)
            except ConnectError as exc:
                errors["name"] = exc.message
        if not errors:
            try:
                services.create_connector(_who(page), page.actor, page.tenant, name, config)
            except InvalidConfig as exc:
                errors = _joined(exc.errors)
            except ConnectError as exc:
                # A name taken is the name's error; the rest (the cluster refused) the form's.
                errors["name" if exc.status == 409 else "form"] = exc.message
            except ServiceError as exc:
                errors["form"] = exc.message
            else:
                messages.success(page.request, f"Connector {name} created.")
                return _back_to(page, str(name))
    shown = {f["name"] for f in fields}
    # Errors about keys without a field of their own (transforms, pasted keys).
    others = {k: v for k, v in errors.items() if k not in shown and k not in FORM_ERRORS}
    for field in fields:
        field["value"] = "" if field["password"] else values.get(field["name"], "")
        field["retype"] = field["password"] and bool(errors) and field["name"] in values
        field["error"] = errors.get(field["name"])
    return page.render(
        "frontend/connect_create.html",
        {
            "plugins": _plugins(),
            "plugin": plugin,
            "plugin_alias": _short(plugin).removesuffix("Connector") if plugin else "",
            "plugin_doc": PLUGINS[plugin].doc if plugin else "",
            "plugin_type": PLUGINS[plugin].kind if plugin else "",
            "own_fields": [f for f in fields if f["own"]],
            "key_fields": [f for f in fields if f["name"] in KEY_FIELDS],
            "common_fields": [f for f in fields if not f["own"] and f["name"] not in KEY_FIELDS],
            "form": form,
            "errors": errors,
            "other_errors": others,
            "file_root_hint": plugin is not None and "file" in shown,
        },
        status=400 if errors else 200,
    )


# --- one connector ---------------------------------------------------------------------------


def _config_rows(config: dict[str, str]) -> list[dict[str, Any]]:
    """The config as shown: secrets masked (keys that look like one, and PASSWORD keys of
    the plugin's definition), the name and class first."""
    passwords: set[str] = set()
    try:
        passwords = {
            d["name"]
            for d in services.plugin_keys(config.get("connector.class", ""))
            if d["type"] == "PASSWORD"
        }
    except ConfigException:
        pass
    first = [k for k in FORM_KEYS if k in config]
    rest = sorted(k for k in config if k not in FORM_KEYS)
    return [
        {
            "key": key,
            "value": MASK if services.is_secret(key) or key in passwords else config[key],
        }
        for key in [*first, *rest]
    ]


def _dead_letters(page: Page, config: dict[str, str]) -> dict[str, Any] | None:
    """The dead-letter queue topic's record count (end minus start offsets), if one is set."""
    name = (config.get(DLQ) or "").strip()
    if not name:
        return None
    topic = Topic.objects.filter(tenant=page.tenant, name=name).first()
    if topic is None:
        return {"topic": name, "exists": False}
    tps = [(topic.name, p.index) for p in topic.partitions.all()]
    with Brokers(page.tenant) as brokers:
        state = brokers.log_state(tps, {})
    if state.failure:
        return {"topic": name, "exists": True, "failure": state.failure}
    records = sum(
        state.end[tp] - state.start[tp] for tp in tps if tp in state.end and tp in state.start
    )
    return {"topic": name, "exists": True, "records": records}


@member_view(SECTION, role=LOOK)
def connector_detail(page: Page, name: str) -> HttpResponse:
    try:
        cluster = Cluster(_who(page))
        with services.existing(cluster, name) as (_, snapshot):
            config = snapshot.connectors[name]
            tasks = len(snapshot.tasks.get(name, []))
            target = snapshot.target_state(name)
        with cluster.statuses() as statuses:
            status = services.connector_status(name, config, statuses, tasks)
            topics = statuses.topics(name) if statuses is not None else []
    except ConnectError as exc:
        if exc.status == 404:
            raise Http404(exc.message) from exc
        return _unreadable(page, name, exc)
    except ServiceError as exc:
        return _unreadable(page, name, exc)
    offsets: list[dict[str, Any]] = []
    offsets_failure = None
    try:
        offsets = services.connector_offsets(cluster, name, config)
    except ConnectError as exc:
        offsets_failure = exc.message
    return page.render(
        "frontend/connect_detail.html",
        {
            "name": name,
            "type": status["type"],
            "plugin": config.get("connector.class", ""),
            "plugin_short": _short(config.get("connector.class", "")),
            "target": target,
            "connector": _state(status["connector"]),
            "tasks": [_state(t) for t in status["tasks"]],
            "config": _config_rows(config),
            "offsets": [
                {
                    "partition": json.dumps(o["partition"], sort_keys=True),
                    "offset": json.dumps(o["offset"], sort_keys=True),
                }
                for o in offsets
            ],
            "offsets_failure": offsets_failure,
            "topics": topics,
            "known_topics": set(
                Topic.objects.filter(tenant=page.tenant, name__in=topics).values_list(
                    "name", flat=True
                )
            ),
            "dead_letters": _dead_letters(page, config),
        },
    )


def _unreadable(page: Page, name: str, exc: ConnectError | ServiceError) -> HttpResponse:
    return page.render(
        "frontend/connect_detail.html",
        {"name": name, "unreadable": _failure(exc)},
        status=503,
    )


def _change(page: Page, name: str, change: Callable[[Cluster], object], success: str) -> bool:
    """Run a change of ``services`` as the member; flash its refusal or ``success``."""
    try:
        change(Cluster(_who(page)))
    except ConnectError as exc:
        if exc.status == 404:
            raise Http404(exc.message) from exc
        messages.error(page.request, exc.message)
        return False
    except ServiceError as exc:
        messages.error(page.request, exc.message)
        return False
    messages.success(page.request, success)
    return True


STATE_DONE = {"pause": "paused", "resume": "resumed", "stop": "stopped"}


@require_POST
@member_view(SECTION, role=CHANGE)
def connector_state(page: Page, name: str) -> HttpResponse:
    """Pause, resume or stop (``action``)."""
    action = page.request.POST.get("action", "")
    if action not in services.TARGET:
        messages.error(page.request, "Choose pause, resume or stop.")
        return _back_to(page, name)
    _change(
        page,
        name,
        lambda c: services.set_target_state(c, page.actor, page.tenant, name, action),
        f"Connector {name} {STATE_DONE[action]}: the workers follow within seconds.",
    )
    return _back_to(page, name)


@require_POST
@member_view(SECTION, role=CHANGE)
def connector_restart(page: Page, name: str) -> HttpResponse:
    """Restart the connector; ``include_tasks`` and ``only_failed`` as the REST API's."""
    post = page.request.POST
    include_tasks, only_failed = bool(post.get("include_tasks")), bool(post.get("only_failed"))
    what = (
        "its failed tasks"
        if only_failed
        else "the connector and its tasks"
        if include_tasks
        else "the connector"
    )
    _change(
        page,
        name,
        lambda c: services.restart_connector(
            c, page.actor, page.tenant, name, include_tasks, only_failed
        ),
        f"Restarting {what} ({name}).",
    )
    return _back_to(page, name)


@require_POST
@member_view(SECTION, role=CHANGE)
def task_restart(page: Page, name: str, task: int) -> HttpResponse:
    _change(
        page,
        name,
        lambda c: services.restart_task(c, page.actor, page.tenant, name, task),
        f"Restarting task {task} of {name}.",
    )
    return _back_to(page, name)


@require_POST
@member_view(SECTION, role=CHANGE)
def connector_topics_reset(page: Page, name: str) -> HttpResponse:
    _change(
        page,
        name,
        lambda c: services.reset_topics(c, page.actor, page.tenant, name),
        f"The active topics of {name} were forgotten; they are recorded again as used.",
    )
    return _back_to(page, name)


@require_http_methods(["GET", "HEAD", "POST"])
@member_view(SECTION, role=CHANGE)
def connector_delete(page: Page, name: str) -> HttpResponse:
    back = reverse("frontend:connector", args=[page.tenant.slug, name])
    if page.request.method == "POST":
        if not _change(
            page,
            name,
            lambda c: services.delete_connector(c, page.actor, page.tenant, name),
            f"Connector {name} deleted.",
        ):
            return _back_to(page, name)
        return redirect("frontend:connectors", tenant_slug=page.tenant.slug)
    try:
        _, tasks = services.connector_config(Cluster(_who(page)), name)
    except ConnectError as exc:
        if exc.status == 404:
            raise Http404(exc.message) from exc
        return _unreadable(page, name, exc)
    except ServiceError as exc:
        return _unreadable(page, name, exc)
    return page.render(
        "frontend/access_confirm.html",
        {
            "title": f"Delete connector {name}?",
            "back": back,
            "back_label": name,
            "consequences": [
                f"The workers stop it and its {tasks} task(s) within seconds.",
                "Its config is removed from connect-configs and its active topics are forgotten.",
                "Its committed offsets stay: a connector created again with this name goes "
                "on from them.",
            ],
            "button": "Delete connector",
        },
    )
