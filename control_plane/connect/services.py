"""A tenant's Connect cluster as the REST API sees it: read from and written to the
cluster's compacted topics over the Kafka protocol, as the caller.

The web tier acts as the calling API key (or as a console member, through the console
principal), so the key's ACLs decide what it may see and change, exactly as for a Kafka
client writing those topics. The cluster is Kafka Connect's default one in the tenant:
group ``connect-cluster``, topics ``connect-configs``, ``connect-offsets`` and
``connect-status`` (the names Kafka's sample ``connect-distributed.properties`` uses), so
workers started with those settings run what the API configures.

Each request reads the topics it needs to their end (a few hundred milliseconds): the
web tier holds no Connect state between requests.

Every change (create, config, delete, pause/resume/stop, restarts, offsets, topics) is a
function here taking whom to act as (a :class:`Delegation`, or a :class:`Cluster` made for
it), the actor and the tenant: it validates, writes the cluster's topics and records the
audit event (secrets hidden). The REST API (``views``) and the console
(``frontend.connect``) call the same functions after checking the caller may (``READ``,
``WRITE``), so both paths change the same way and both are audited.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from control_plane.access.policy import Need
from control_plane.audit.services import record_event
from control_plane.streams.kafka import Delegation, bootstrap_servers
from data_plane import internal_auth
from data_plane.acl import Operation, ResourceType
from data_plane.connect.cluster_stores import (
    ClusterConfig,
    ConfigStore,
    RestartRequest,
    StatusStore,
    TopicOffsetStore,
    ensure_cluster_topics,
)
from data_plane.connect.config import ConfigException
from data_plane.connect.connectors.file import (
    FileStreamSinkConnector,
    FileStreamSourceConnector,
    resolve,
)
from data_plane.connect.kafka_log import KafkaBasedLog, LogError
from data_plane.connect.offsets import offset_key
from data_plane.connect.plugins import PLUGINS, connector_class, plugin_name
from data_plane.connect.worker import CONNECTOR_CONFIG, SINK_CONFIG, validate_connector_config

if TYPE_CHECKING:
    from control_plane.core.actor import Actor
    from control_plane.tenancy.models import Tenant

API_KEY = "kafka.api.key"
API_SECRET = "kafka.api.secret"
GROUP = internal_auth.CONNECT_GROUP
FILE_CONNECTORS = (FileStreamSourceConnector, FileStreamSinkConnector)
CONFIGS, OFFSETS, STATUS = internal_auth.CONNECT_TOPICS
READ_TIMEOUT_S = 15.0
# Who may look and who may change, on each of the cluster's topics: an API key needs the
# operation on the topic (its ACLs), a member the role (the console checks the same role).
READ = Need("viewer", Operation.READ, ResourceType.TOPIC)
WRITE = Need("developer", Operation.WRITE, ResourceType.TOPIC)
TARGET = {"pause": "PAUSED", "resume": "STARTED", "stop": "STOPPED"}


class ConnectError(Exception):
    """An answer in Kafka Connect's error shape: ``{"error_code", "message"}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class InvalidConfig(ConnectError):
    """A connector config refused by validation (400), with every key's errors."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        super().__init__(400, invalid_message(errors))
        self.errors = dict(errors)


def client_conf(who: Delegation) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(bootstrap_servers()),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": internal_auth.MECHANISM,
        "sasl.username": who.username,
        "sasl.password": internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
        "client.id": f"millrace-web-connect/{who.key_id}",
    }


def connect_conf(tenant_slug: str) -> dict[str, Any]:
    """Client settings of the tenant's Connect principal (``internal_auth``)."""
    return {
        "bootstrap.servers": ",".join(bootstrap_servers()),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": internal_auth.MECHANISM,
        "sasl.username": internal_auth.connect_username(tenant_slug),
        "sasl.password": internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
        "client.id": "millrace-web-connect/cluster",
    }


def file_root(tenant_slug: str) -> str:
    return str(Path(settings.MILLRACE_CONNECT_FILE_ROOT) / tenant_slug)


def _factory(conf: dict[str, Any], topic: str) -> Any:
    return lambda callback: KafkaBasedLog(topic, conf, callback, name="millrace-web")


def _missing(exc: LogError) -> bool:
    return "absent" in str(exc) or "UNKNOWN_TOPIC" in str(exc)


def _stop(store: Any) -> None:
    """Stop a store's log. Its producer asks for an idempotent producer id as it starts,
    which a caller who may write no topic at all (a viewer's console principal; KIP-679)
    is refused: the producer, never used, then fails fatally and its flush on stop says
    so. Nothing was written then, so a read is not failed for it (what is written fails
    at once: ``send`` waits for the acknowledgement)."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        store.stop()
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError):
            raise
        if error.code() != KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise


@contextlib.contextmanager
def _opened(store: Any) -> Iterator[Any]:
    try:
        store.start(READ_TIMEOUT_S)
    except LogError as exc:
        _stop(store)
        if _missing(exc):
            yield None
            return
        raise ConnectError(403 if "AUTHORIZATION" in str(exc) else 500, str(exc)) from exc
    try:
        yield store
    finally:
        _stop(store)


class Cluster:
    """One request's view of the tenant's Connect cluster."""

    def __init__(self, who: Delegation) -> None:
        self.who = who
        self.conf = client_conf(who)

    # --- reads --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def configs(self) -> Iterator[ConfigStore | None]:
        with _opened(ConfigStore(_factory(self.conf, CONFIGS))) as store:
            yield store

    @contextlib.contextmanager
    def statuses(self) -> Iterator[StatusStore | None]:
        with _opened(StatusStore(_factory(self.conf, STATUS))) as store:
            yield store

    @contextlib.contextmanager
    def offsets(self) -> Iterator[TopicOffsetStore | None]:
        with _opened(TopicOffsetStore(_factory(self.conf, OFFSETS))) as store:
            yield store

    def sink_offsets(self, connector: str) -> list[dict[str, Any]]:
        """A sink connector's committed offsets: its consumer group's (KIP-875's shape)."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.conf)
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(f"connect-{connector}")], request_timeout=READ_TIMEOUT_S
        )
        try:
            answer = next(iter(futures.values())).result(READ_TIMEOUT_S)
        except Exception as exc:
            raise ConnectError(
                403 if "AUTHORIZATION" in str(exc) else 500, f"reading the group's offsets: {exc}"
            ) from exc
        return [
            {
                "partition": {"kafka_topic": tp.topic, "kafka_partition": tp.partition},
                "offset": {"kafka_offset": tp.offset},
            }
            for tp in sorted(answer.topic_partitions, key=lambda t: (t.topic, t.partition))
            if tp.offset >= 0
        ]

    def _ensure_topics(self) -> None:
        """The cluster's topics, made by the platform (as the tenant's Connect principal,
        which may create only these): a caller who may change connectors need not be
        allowed to create topics, and the fleet runs the cluster from then on."""
        try:
            ensure_cluster_topics(
                connect_conf(self.who.tenant_slug),
                {CONFIGS: (1, -1), OFFSETS: (25, -1), STATUS: (5, -1)},
            )
        except Exception as exc:
            raise ConnectError(
                403 if "AUTHORIZATION" in str(exc) else 500,
                f"the Connect cluster's topics could not be created: {exc}",
            ) from exc

    @contextlib.contextmanager
    def writable_configs(self) -> Iterator[ConfigStore]:
        """The configs topic, created (with the other two) if the cluster has none yet."""
        self._ensure_topics()
        with self.configs() as store:
            if store is None:
                raise ConnectError(500, f"topic {CONFIGS} is not readable yet; try again")
            yield store

    # --- offsets (KIP-875; the connector is stopped) ------------------------------------------

    def alter_source_offsets(self, connector: str, entries: list[dict[str, Any]]) -> None:
        self._ensure_topics()
        with self.offsets() as store:
            if store is None:
                raise ConnectError(500, f"topic {OFFSETS} is not readable yet; try again")
            store.put(connector, {offset_key(connector, e["partition"]): e["offset"]
                                  for e in entries})  # fmt: skip

    def reset_source_offsets(self, connector: str) -> None:
        with self.offsets() as store:
            if store is None:
                return
            found = store.connector_offsets(connector)
            if found:
                store.put(connector, {offset_key(connector, p): None for p, _ in found})

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.conf)

    def alter_sink_offsets(
        self, connector: str, changes: Mapping[tuple[str, int], int | None], tenant_id: int
    ) -> None:
        """Commit the set offsets to the sink's group; remove those set to null."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        group = f"connect-{connector}"
        wanted = [TopicPartition(t, p, o) for (t, p), o in sorted(changes.items()) if o is not None]
        if wanted:
            admin = self._admin()  # held until the answer: a dropped client never answers
            futures = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, wanted)], request_timeout=READ_TIMEOUT_S
            )
            try:
                answer = next(iter(futures.values())).result(READ_TIMEOUT_S)
            except Exception as exc:
                raise ConnectError(_status(exc), f"altering the group's offsets: {exc}") from exc
            for tp in answer.topic_partitions:
                if tp.error is not None:
                    raise ConnectError(400, f"{tp.topic}-{tp.partition}: {tp.error.str()}")
        removed = [(t, p) for (t, p), o in sorted(changes.items()) if o is None]
        if removed:
            from control_plane.groups import services as group_services

            group_services.remove_offsets(tenant_id, group, removed)

    def reset_sink_offsets(self, connector: str) -> None:
        """The sink's group deleted (Kafka Connect's reset of a sink)."""
        group = f"connect-{connector}"
        admin = self._admin()  # held until the answer: a dropped client never answers
        futures = admin.delete_consumer_groups([group], request_timeout=READ_TIMEOUT_S)
        try:
            next(iter(futures.values())).result(READ_TIMEOUT_S)
        except Exception as exc:
            if "GROUP_ID_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
                return  # no offsets to reset
            raise ConnectError(_status(exc), f"deleting the group {group}: {exc}") from exc


def _status(exc: BaseException) -> int:
    text = str(exc)
    if "AUTHORIZATION" in text:
        return 403
    if "NON_EMPTY_GROUP" in text or "UNKNOWN_MEMBER" in text or "REBALANCE" in text:
        return 409
    return 500


_SECRET = ("password", "secret", "token", "jaas", "credential", "api.key")


def is_secret(key: str) -> bool:
    """Whether a config key's value is kept out of sight (the audit log, the console).
    ``kafka.api.key`` is a key's id, shown like any service account's key id."""
    return key != API_KEY and any(s in key.lower() for s in _SECRET)


def redacted(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A config as the audit log keeps it: secrets hidden."""
    if config is None:
        return None
    return {k: "[hidden]" if is_secret(k) else v for k, v in config.items()}


def offsets_body(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """KIP-875's ``{"offsets": [{"partition": {...}, "offset": {...} | null}, ...]}``."""
    entries = body.get("offsets")
    if not isinstance(entries, list) or not entries:
        raise ConnectError(400, 'the body needs "offsets": a non-empty list')
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("partition"), dict):
            raise ConnectError(400, f'offsets[{i}] needs a "partition" object')
        if not entry["partition"]:
            raise ConnectError(400, f"offsets[{i}]: the partition must not be empty")
        offset = entry.get("offset")
        if offset is not None and not isinstance(offset, dict):
            raise ConnectError(400, f'offsets[{i}]: the "offset" must be an object or null')
        out.append({"partition": dict(entry["partition"]), "offset": offset})
    return out


def sink_offsets_body(entries: list[dict[str, Any]]) -> dict[tuple[str, int], int | None]:
    """A sink's entries as (topic, partition) → offset (None: remove)."""
    out: dict[tuple[str, int], int | None] = {}
    for i, entry in enumerate(entries):
        partition, offset = entry["partition"], entry["offset"]
        topic, number = partition.get("kafka_topic"), partition.get("kafka_partition")
        if not isinstance(topic, str) or not topic or not _whole(number) or number < 0:
            shape = '{"kafka_topic": <name>, "kafka_partition": <n ≥ 0>}'
            raise ConnectError(400, f"offsets[{i}]: a sink's partition is {shape}")
        if offset is not None:
            value = offset.get("kafka_offset")
            if not _whole(value) or value < 0 or set(offset) != {"kafka_offset"}:
                shape = '{"kafka_offset": <n ≥ 0>}'
                raise ConnectError(400, f"offsets[{i}]: a sink's offset is {shape}")
            out[(topic, number)] = value
        else:
            out[(topic, number)] = None
    return out


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- the answers ---------------------------------------------------------------------------


def connector_type(config: Mapping[str, str]) -> str:
    try:
        return connector_class(config.get("connector.class", "")).kind
    except ConfigException:
        return "unknown"


def connector_info(name: str, config: Mapping[str, str], tasks: int) -> dict[str, Any]:
    return {
        "name": name,
        "config": {**config, "name": name},
        "tasks": [{"connector": name, "task": i} for i in range(tasks)],
        "type": connector_type(config),
    }


def connector_status(
    name: str, config: Mapping[str, str], statuses: StatusStore | None, tasks: int
) -> dict[str, Any]:
    def state(found: Mapping[str, Any] | None) -> dict[str, Any]:
        if not found:
            return {"state": "UNASSIGNED", "worker_id": ""}
        out = {"state": found.get("state", "UNASSIGNED"), "worker_id": found.get("worker_id", "")}
        if found.get("trace"):
            out["trace"] = found["trace"]
        return out

    task_statuses = statuses.tasks(name) if statuses is not None else {}
    return {
        "name": name,
        "connector": state(statuses.connector(name) if statuses is not None else None),
        "tasks": [{"id": i, **state(task_statuses.get(i))} for i in range(tasks)],
        "type": connector_type(config),
    }


def connector_states(tenant_slug: str) -> dict[str, str] | None:
    """The state of every connector ("name") and task ("name/0") of the tenant's Connect
    cluster, read as its Connect principal (alerts watch them); None: it has no cluster.
    ConnectError when the cluster's topics cannot be read."""
    conf = connect_conf(tenant_slug)
    with _opened(ConfigStore(_factory(conf, CONFIGS))) as store:
        snapshot = store.snapshot() if store is not None else None
    if snapshot is None:
        return None
    states: dict[str, str] = {}
    with _opened(StatusStore(_factory(conf, STATUS))) as statuses:
        for name, config in snapshot.connectors.items():
            status = connector_status(name, config, statuses, len(snapshot.tasks.get(name, [])))
            states[name] = status["connector"]["state"]
            for task in status["tasks"]:
                states[f"{name}/{task['id']}"] = task["state"]
    return states


def validation_errors(config: Mapping[str, str], tenant_slug: str) -> dict[str, list[str]]:
    return validate_connector_config(config, {"file.root": file_root(tenant_slug)})


def placed(config: dict[str, str], tenant_slug: str) -> dict[str, str]:
    """A valid config as stored: a file connector's ``file`` made absolute inside the
    tenant's directory (``MILLRACE_CONNECT_FILE_ROOT/<tenant>``), so every worker reads
    the name the same way."""
    if connector_class(config["connector.class"]) in FILE_CONNECTORS and config.get("file"):
        Path(file_root(tenant_slug)).mkdir(parents=True, exist_ok=True)
        config = {**config, "file": resolve(config["file"].strip(), file_root(tenant_slug))}
    return config


def invalid_message(errors: Mapping[str, list[str]]) -> str:
    count = sum(len(v) for v in errors.values())
    lines = [
        f"{key}: {message}" for key, messages in sorted(errors.items()) for message in messages
    ]
    return (
        f"Connector configuration is invalid and contains the following {count} error(s):\n"
        + "\n".join(lines)
        + "\nYou can also find the above list of errors at the endpoint "
        "`/connector-plugins/{connectorType}/config/validate`"
    )


def validate_plugin(plugin: str, config: Mapping[str, str], tenant_slug: str) -> dict[str, Any]:
    """Kafka Connect's ``PUT /connector-plugins/{plugin}/config/validate`` answer."""
    try:
        full = plugin_name(plugin)
    except ConfigException as exc:
        raise ConnectError(404, exc.message) from exc
    kind = PLUGINS[full]
    config = {**config, "connector.class": config.get("connector.class") or full}
    errors = validation_errors(config, tenant_slug)
    definition = CONNECTOR_CONFIG.merged(kind.config_def)
    if kind.kind == "sink":
        definition = definition.merged(SINK_CONFIG)
    entries = definition.validate(config)
    for entry in entries:
        entry["value"]["errors"] = errors.pop(entry["definition"]["name"], [])
    for key, messages in sorted(errors.items()):  # transforms and checks across keys
        entries.append(
            {
                "definition": {"name": key},
                "value": {
                    "name": key,
                    "value": config.get(key),
                    "recommended_values": [],
                    "errors": messages,
                    "visible": True,
                },
            }
        )
    return {
        "name": full,
        "error_count": sum(len(e["value"]["errors"]) for e in entries),
        "groups": sorted(
            {e["definition"]["group"] for e in entries if e["definition"].get("group")}
        ),
        "configs": entries,
    }


# --- reads the REST API and the console share ----------------------------------------------


def cluster_of(who: Delegation | Cluster) -> Cluster:
    return who if isinstance(who, Cluster) else Cluster(who)


def not_found(name: str) -> ConnectError:
    return ConnectError(404, f"Connector {name} not found")


@contextlib.contextmanager
def existing(who: Delegation | Cluster, name: str) -> Iterator[tuple[ConfigStore, ClusterConfig]]:
    """The configs topic and its snapshot, with the connector in it (else 404)."""
    with cluster_of(who).configs() as store:
        snapshot = store.snapshot() if store is not None else None
        if store is None or snapshot is None or name not in snapshot.connectors:
            raise not_found(name)
        yield store, snapshot


def connector_config(who: Delegation | Cluster, name: str) -> tuple[dict[str, str], int]:
    """The connector's config and its number of (committed) tasks; 404 if there is none."""
    with existing(who, name) as (_, snapshot):
        return snapshot.connectors[name], len(snapshot.tasks.get(name, []))


def connector_offsets(
    who: Delegation | Cluster, name: str, config: Mapping[str, str]
) -> list[dict[str, Any]]:
    """KIP-875's entries: a sink's as its group committed them, a source's from
    ``connect-offsets`` (the caller checked it may read them)."""
    cluster = cluster_of(who)
    if connector_type(config) == "sink":
        return cluster.sink_offsets(name)
    with cluster.offsets() as store:
        found = store.connector_offsets(name) if store is not None else []
    return [{"partition": p, "offset": o} for p, o in found]


def plugin_keys(plugin: str) -> list[dict[str, Any]]:
    """The keys a plugin's connector takes (Kafka Connect's definitions): its own first,
    then a sink's topics, then those every connector has."""
    kind = connector_class(plugin)
    own = [key.definition() for key in kind.config_def.keys.values()]
    sink = [key.definition() for key in SINK_CONFIG.keys.values()] if kind.kind == "sink" else []
    common = [key.definition() for key in CONNECTOR_CONFIG.keys.values()]
    return [*own, *sink, *common]


# --- changes: checked, written, audited ------------------------------------------------------


def record(
    actor: Actor,
    tenant: Tenant,
    action: str,
    name: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    """Record a change of the tenant's Connect cluster in its audit log (secrets in a
    connector config are recorded as hidden)."""
    record_event(
        actor, tenant=tenant, action=f"connect.{action}",
        object_type="connector", object_id=name, object_repr=name,
        before=redacted(before), after=redacted(after),
    )  # fmt: skip


def config_string(value: Any) -> str:
    """A JSON value of a config as Kafka Connect keeps it: a string."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ConnectError(400, f"config values are strings, not {type(value).__name__}")


def string_config(raw: Any) -> dict[str, str]:
    """A JSON object as a connector config (strings; numbers and booleans as JSON writes
    them; null refused)."""
    if not isinstance(raw, dict):
        raise ConnectError(400, "config must be a JSON object of strings")
    out = {}
    for key, value in raw.items():
        if value is None:
            raise ConnectError(400, f"config value of {key!r} is null")
        out[str(key)] = config_string(value)
    return out


def connector_name(raw: Any) -> str:
    """A new connector's name, checked."""
    if not isinstance(raw, str) or not raw.strip():
        raise ConnectError(400, "the connector needs a name")
    name = raw.strip()
    if "/" in name or len(name) > 249:
        raise ConnectError(400, f"connector name {name!r} is not valid")
    return name


def checked(
    name: str,
    config: Mapping[str, str],
    tenant_slug: str,
    run_as_errors: Mapping[str, list[str]] | None = None,
) -> dict[str, str]:
    """The config as stored (named, a file connector's file placed); InvalidConfig if any
    key is refused (with ``run_as_errors``, the key it runs as refused)."""
    config = {**config, "name": name}
    errors = validation_errors(config, tenant_slug)
    for key, found in (run_as_errors or {}).items():
        errors.setdefault(key, []).extend(found)
    if errors:
        raise InvalidConfig(errors)
    return placed(config, tenant_slug)


def run_as(
    who: Delegation | Cluster, tenant: Tenant, config: Mapping[str, str], kept: str | None = None
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The config with the API key its connector runs as (``kafka.api.key``): by default
    the calling key; a key named must be an active key of the tenant that the caller may
    act as: one whose secret comes with it (``kafka.api.secret``, checked and never
    stored), one of its own service account's keys, or, from the console, any key for an
    admin or owner. Nobody gets a connector to act with rights they do not have. The key
    the connector already ran as (``kept``) may stay whoever edits the rest. (The config,
    the errors of those two keys.)"""
    from control_plane.access import services as access_services
    from control_plane.access.models import ApiKey
    from control_plane.connect.fleet import key_error
    from control_plane.tenancy.models import Membership, Role

    caller = cluster_of(who).who
    config = dict(config)
    named = (config.get(API_KEY) or "").strip()
    secret = config.pop(API_SECRET, None)  # proves the key is the caller's to use; not kept
    if secret is not None:
        if not named:
            return config, {API_KEY: [f"name the key {API_SECRET} is the secret of"]}
        try:
            proved = access_services.authenticate_api_key(named, str(secret).strip())
        except access_services.KeyRejected as exc:
            return config, {API_SECRET: [str(exc)]}
        if proved.tenant_id != tenant.pk:
            return config, {API_KEY: [f"{named!r} is not an API key of this tenant"]}
        config[API_KEY] = named
        return config, {}
    if not named:
        if caller.console_user is not None:
            return config, {API_KEY: ["choose the API key this connector runs as"]}
        config[API_KEY] = caller.key_id
        return config, {}
    if named == kept:
        config[API_KEY] = named
        return config, {}
    problem = key_error(tenant.slug, named)
    if problem is not None:
        return config, {API_KEY: [problem]}
    if caller.console_user is not None:
        role = (
            Membership.objects.filter(tenant=tenant, user_id=caller.console_user)
            .values_list("role", flat=True)
            .first()
        )
        if role is None or not Role.at_least(role, Role.ADMIN):
            return config, {API_SECRET: [
                f"the secret of {named}: only an admin or owner may choose a key without it"
            ]}  # fmt: skip
    else:
        accounts = set(
            ApiKey.objects.filter(key_id__in=[named, caller.key_id]).values_list(
                "key_id", "service_account_id"
            )
        )
        owners = {account for _, account in accounts}
        if len(owners) != 1 and named != caller.key_id:
            return config, {API_SECRET: [
                f"the secret of {named}: it is a key of another service account than the "
                "calling key's"]}  # fmt: skip
    config[API_KEY] = named
    return config, {}


def within_limits(
    tenant: Tenant, connectors: Mapping[str, Mapping[str, str]], name: str,
    config: Mapping[str, str],
) -> None:  # fmt: skip
    """Refuse a connector config that would take the tenant past its Connect limits
    (``max_connectors``; ``max_connector_tasks``, the connectors' ``tasks.max`` summed)."""
    others = {n: c for n, c in connectors.items() if n != name}
    if len(others) + 1 > tenant.max_connectors:
        raise ConnectError(400, f"tenant {tenant.slug} may have {tenant.max_connectors} "
                                f"connectors; it has {len(others)}")  # fmt: skip
    tasks = sum(_tasks_max(c) for c in others.values())
    if tasks + _tasks_max(config) > tenant.max_connector_tasks:
        left = max(tenant.max_connector_tasks - tasks, 0)
        raise InvalidConfig({"tasks.max": [
            f"tenant {tenant.slug} may run {tenant.max_connector_tasks} tasks in all; "
            f"{tasks} are taken by its other connectors, so at most {left} here"]})  # fmt: skip


def _tasks_max(config: Mapping[str, str]) -> int:
    try:
        return max(int(str(config.get("tasks.max") or "1").strip()), 1)
    except ValueError:
        return 1


def create_connector(
    who: Delegation | Cluster, actor: Actor, tenant: Tenant, name: Any, config: Mapping[str, str]
) -> dict[str, Any]:
    """A new connector (409 if the name is taken); its info."""
    name = connector_name(name)
    keyed, key_errors = run_as(who, tenant, config)
    config = checked(name, keyed, tenant.slug, key_errors)
    with cluster_of(who).writable_configs() as store:
        snapshot = store.snapshot()
        if name in snapshot.connectors:
            raise ConnectError(409, f"Connector {name} already exists")
        within_limits(tenant, snapshot.connectors, name, config)
        store.put_connector(name, config)
    record(actor, tenant, "create", name, after=config)
    return connector_info(name, config, 0)


def put_connector_config(
    who: Delegation | Cluster, actor: Actor, tenant: Tenant, name: str, config: Mapping[str, str]
) -> tuple[dict[str, Any], bool]:
    """Create or replace a connector's config: (its info, whether it was created)."""
    with cluster_of(who).writable_configs() as store:
        snapshot = store.snapshot()
        kept = (snapshot.connectors.get(name) or {}).get(API_KEY)
        keyed, key_errors = run_as(who, tenant, config, kept)
        config = checked(name, keyed, tenant.slug, key_errors)
        created = name not in snapshot.connectors
        within_limits(tenant, snapshot.connectors, name, config)
        store.put_connector(name, config)
    record(actor, tenant, "create" if created else "update", name,
           before=snapshot.connectors.get(name), after=config)  # fmt: skip
    tasks = 0 if created else len(snapshot.tasks.get(name, []))
    return connector_info(name, config, tasks), created


def patch_connector_config(
    who: Delegation | Cluster, actor: Actor, tenant: Tenant, name: str, changes: Mapping[str, Any]
) -> tuple[dict[str, Any], bool]:
    """KIP-477: keys set are changed, keys set to None are removed (404 if there is no
    such connector)."""
    cluster = cluster_of(who)
    config, _ = connector_config(cluster, name)
    for key, value in changes.items():
        if value is None:
            config.pop(str(key), None)
        else:
            config[str(key)] = config_string(value)
    return put_connector_config(cluster, actor, tenant, name, config)


def delete_connector(who: Delegation | Cluster, actor: Actor, tenant: Tenant, name: str) -> None:
    cluster = cluster_of(who)
    with existing(cluster, name) as (store, snapshot):
        store.remove_connector(name)
    record(actor, tenant, "delete", name, before=snapshot.connectors[name])
    with contextlib.suppress(ConnectError), cluster.statuses() as statuses:
        if statuses is not None:  # a deleted connector's active topics go too (KIP-558)
            statuses.reset_topics(name)


def set_target_state(
    who: Delegation | Cluster, actor: Actor, tenant: Tenant, name: str, action: str
) -> None:
    """``pause``, ``resume`` or ``stop`` the connector."""
    if action not in TARGET:
        raise ConnectError(400, f"unknown action {action!r}")
    with existing(who, name) as (store, _):
        store.put_target_state(name, TARGET[action])
    record(actor, tenant, action, name, after={"state": TARGET[action]})


def restart_connector(
    who: Delegation | Cluster,
    actor: Actor,
    tenant: Tenant,
    name: str,
    include_tasks: bool = False,
    only_failed: bool = False,
) -> dict[str, Any] | None:
    """Ask the workers to restart the connector (and its tasks, or only the failed ones):
    its status with what restarts marked ``RESTARTING``, or None for the connector alone."""
    cluster = cluster_of(who)
    with existing(cluster, name) as (store, snapshot):
        store.request_restart(RestartRequest(name, None, include_tasks, only_failed))
    record(actor, tenant, "restart", name, after={"includeTasks": include_tasks,
                                                  "onlyFailed": only_failed})  # fmt: skip
    if not include_tasks and not only_failed:
        return None
    config, tasks = snapshot.connectors[name], len(snapshot.tasks.get(name, []))
    with cluster.statuses() as statuses:
        status = connector_status(name, config, statuses, tasks)
    for entry in [status["connector"], *status["tasks"]]:
        if not only_failed or entry["state"] == "FAILED":
            entry["state"] = "RESTARTING"
    return status


def restart_task(
    who: Delegation | Cluster, actor: Actor, tenant: Tenant, name: str, task: int
) -> None:
    with existing(who, name) as (store, snapshot):
        if task >= len(snapshot.tasks.get(name, [])):
            raise ConnectError(404, f"Task {name}-{task} not found")
        store.request_restart(RestartRequest(name, task))
    record(actor, tenant, "restart_task", name, after={"task": task})


def _anyone(kind: str) -> None:
    """May change any connector's offsets (the caller checked already)."""


def stopped_config(who: Delegation | Cluster, name: str) -> dict[str, str]:
    """The connector's config, once it is STOPPED with no tasks (else 400), as KIP-875
    requires before its offsets change."""
    with existing(who, name) as (_, snapshot):
        if snapshot.target_state(name) != "STOPPED" or snapshot.tasks.get(name):
            raise ConnectError(400, (
                "Connectors must be in the STOPPED state before their offsets can be "
                "modified. This can be done for the specified connector by issuing a "
                f"'PUT' request to the '/connectors/{name}/stop' endpoint"))  # fmt: skip
        return snapshot.connectors[name]


def alter_offsets(
    who: Delegation | Cluster,
    actor: Actor,
    tenant: Tenant,
    name: str,
    body: Mapping[str, Any],
    authorize: Callable[[str], None] = _anyone,
) -> None:
    """KIP-875's ``PATCH .../offsets`` of a stopped connector. ``authorize`` is called with
    the connector's type (``sink`` or ``source``) before anything changes: a sink's
    offsets are its group's, a source's are in ``connect-offsets``."""
    entries = offsets_body(body)
    cluster = cluster_of(who)
    config = stopped_config(cluster, name)
    kind = connector_type(config)
    authorize(kind)
    if kind == "sink":
        cluster.alter_sink_offsets(name, sink_offsets_body(entries), tenant.pk)
    else:
        cluster.alter_source_offsets(name, entries)
    record(actor, tenant, "alter_offsets", name, after={"offsets": entries})


def reset_offsets(
    who: Delegation | Cluster,
    actor: Actor,
    tenant: Tenant,
    name: str,
    authorize: Callable[[str], None] = _anyone,
) -> None:
    """KIP-875's ``DELETE .../offsets`` of a stopped connector (a sink: its group deleted)."""
    cluster = cluster_of(who)
    config = stopped_config(cluster, name)
    kind = connector_type(config)
    authorize(kind)
    if kind == "sink":
        cluster.reset_sink_offsets(name)
    else:
        cluster.reset_source_offsets(name)
    record(actor, tenant, "reset_offsets", name)


def reset_topics(who: Delegation | Cluster, actor: Actor, tenant: Tenant, name: str) -> None:
    """Forget the topics the connector has used (KIP-558)."""
    cluster = cluster_of(who)
    connector_config(cluster, name)
    with cluster.statuses() as statuses:
        if statuses is not None:
            statuses.reset_topics(name)
    record(actor, tenant, "reset_topics", name)
