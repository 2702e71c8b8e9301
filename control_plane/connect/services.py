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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from control_plane.streams.kafka import Delegation, bootstrap_servers
from data_plane import internal_auth
from data_plane.connect.cluster_stores import (
    ConfigStore,
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

GROUP = "connect-cluster"
FILE_CONNECTORS = (FileStreamSourceConnector, FileStreamSinkConnector)
CONFIGS, OFFSETS, STATUS = "connect-configs", "connect-offsets", "connect-status"
READ_TIMEOUT_S = 15.0


class ConnectError(Exception):
    """An answer in Kafka Connect's error shape: ``{"error_code", "message"}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def client_conf(who: Delegation) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(bootstrap_servers()),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": internal_auth.MECHANISM,
        "sasl.username": who.username,
        "sasl.password": internal_auth.password(settings.MILLRACE_INTERNAL_SECRET),
        "client.id": f"millrace-web-connect/{who.key_id}",
    }


def file_root(tenant_slug: str) -> str:
    return str(Path(settings.MILLRACE_CONNECT_FILE_ROOT) / tenant_slug)


def _factory(conf: dict[str, Any], topic: str) -> Any:
    return lambda callback: KafkaBasedLog(topic, conf, callback, name="millrace-web")


def _missing(exc: LogError) -> bool:
    return "absent" in str(exc) or "UNKNOWN_TOPIC" in str(exc)


@contextlib.contextmanager
def _opened(store: Any) -> Iterator[Any]:
    try:
        store.start(READ_TIMEOUT_S)
    except LogError as exc:
        store.stop()
        if _missing(exc):
            yield None
            return
        raise ConnectError(403 if "AUTHORIZATION" in str(exc) else 500, str(exc)) from exc
    try:
        yield store
    finally:
        store.stop()


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
        try:
            ensure_cluster_topics(self.conf, {CONFIGS: (1, -1), OFFSETS: (25, -1), STATUS: (5, -1)})
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


def redacted(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A config as the audit log keeps it: secrets hidden."""
    if config is None:
        return None
    return {k: "[hidden]" if any(s in k.lower() for s in _SECRET) else v
            for k, v in config.items()}  # fmt: skip


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
