"""Mirror source: copies topics from another Kafka-protocol cluster into this one, with
the consumer groups' offsets translated, in the spirit of Kafka's MirrorMaker 2 (KIP-382).

The **source** cluster is named by ``source.cluster.*``; the **target** is the worker's
own cluster (its ``bootstrap.servers`` and credentials). Each task copies a share of the
source partitions: records keep their key, value, headers, timestamp and partition, and
land in ``<alias>.<topic>`` (``DefaultReplicationPolicy``) or in a topic of the same name
(``IdentityReplicationPolicy``), created with the source topic's partition count (and
``cleanup.policy=compact`` if the source topic is compacted). Internal topics (``_*``,
``*.internal``, ``*-internal``, ``*.replica``, ``mm2-*``) are never copied. New topics
and partitions are picked up every ``refresh.topics.interval.seconds``; a partition
belongs to task ``(crc32(topic) + partition) % tasks`` for good, so tasks never share one.

**Offsets.** The source partition is ``{"cluster": alias, "topic": t, "partition": p}``
and the offset ``{"offset": o}``; a restarted task reads on from ``o + 1``. The records are
read at ``read_committed``: aborted transactions are not copied, and transaction markers
and compacted-away records leave gaps upstream that the target does not have.

**Where records landed.** The worker's producer writes the records and hands the task
back the record it was given (:meth:`SourceTask.commit_record`), not the offset it got.
So the task derives it: when it takes a partition on, it reads the target partition's end
offset ``E``; the k-th record acknowledged after that is at ``E + k`` (acknowledgements of
one partition arrive in order from the idempotent producer). Derived pairs are only
*pending* until confirmed: every ``emit.checkpoints.interval.seconds`` the task holds back
a partition's new records until everything sent for it is acknowledged, reads the end
offset again and keeps the pending pairs only if it equals the derived one; otherwise
(another writer in the topic, a transform that dropped a record, a tolerated send
failure) it forgets them and counts on from the offset it read. Confirmed pairs are kept
in memory as runs (:class:`OffsetSyncs`), and the first and the latest of each
confirmation are written to the compacted topic ``mm2-offset-syncs.<alias>.internal`` in
the target (key ``{"topic", "partition"}`` of the source partition, value ``{"upstream",
"downstream"}``), from which a restarted task seeds its memory.

**Translation** (MirrorMaker 2's rule since KAFKA-12468): for a group's committed source
offset ``U`` (the next record it would read), take the latest known pair ``(u, d)`` with
``u <= U``; the target offset is ``d`` if ``u == U`` and ``d + 1`` otherwise (records
after ``u`` landed after ``d``). A consumer that resumes there may read again what it had
read, never skip. Without such a pair (no record copied yet, or ``U`` before the first
known one) there is no translation. Every ``emit.checkpoints.interval.seconds`` each task
reads the offsets of the source groups matching ``groups`` for its partitions and writes
a checkpoint per group and partition to ``<alias>.checkpoints.internal`` (key
``{"group", "topic", "partition"}`` with the *target* topic, value ``{"upstream",
"downstream"}``) when it changed, never moving a checkpoint back unless the group itself
went back upstream. Every ``sync.group.offsets.interval.seconds`` it commits the
translated offsets to the group of the same name in the target, only if that group has no
active members there and only where this moves the group's offset forward.

The records must pass the converters as bytes: the connector's (or the worker's)
``key.converter`` and ``value.converter`` must be
``org.apache.kafka.connect.converters.ByteArrayConverter`` (the validation says so
otherwise). Transforms that drop or re-route records defeat the offset derivation (it then
discards its pairs, safely, but translates less).

A worker that runs other people's connectors may set ``mirror.allowed.hosts`` in its
worker config (a comma-separated list of ``host`` or ``host:port``): the source cluster's
bootstrap servers must then be among them.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import logging
import re
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, cast

from data_plane.connect.api import ConnectException, SourceConnector, SourceTask
from data_plane.connect.config import (
    ConfigDef,
    ConfigException,
    ConfigKey,
    ConfigType,
    Importance,
    at_least,
    non_empty,
    one_of,
)
from data_plane.connect.data import OPTIONAL_BYTES_SCHEMA, ConnectRecord

logger = logging.getLogger(__name__)

VERSION = "1.0"
BYTE_ARRAY_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
ALLOWED_HOSTS = "mirror.allowed.hosts"  # the worker config key
SOURCE = "source.cluster."
TARGET = "target.cluster."
TASK_INDEX, TASK_COUNT = "mirror.task.index", "mirror.task.count"
INTERNAL_TOPICS = re.compile(r"_.*|.*[-.]internal|.*\.replica|mm2-.*")
MAX_RUNS = 1024  # runs of known offset pairs kept per partition
BATCH = 500
DRAIN_TIMEOUT_S = 10.0  # the longest a partition's records are held back for a confirmation
_ALIAS = re.compile(r"[A-Za-z0-9_-]+$")
_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
# librdkafka settings of the worker's own clients (as the runtime's task clients use them).
_WORKER_CLIENT_KEYS = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
)


def _regex_list(name: str, value: Any) -> None:
    for pattern in value or []:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigException(name, f"{pattern!r} is not a regular expression: {exc}") from exc


def _alias(name: str, value: Any) -> None:
    if not _ALIAS.match(str(value)):
        raise ConfigException(name, "must be letters, digits, _ and - (it prefixes topic names)")


def _separator(name: str, value: Any) -> None:
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,8}", str(value)):
        raise ConfigException(name, "must be 1 to 8 of the characters a topic name may hold")


# The source cluster's client settings this connector passes on (any other
# ``source.cluster.*`` key is refused: librdkafka has settings that load code or files).
SOURCE_CLIENT_KEYS = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
)

CONFIG = ConfigDef(
    [
        ConfigKey("source.cluster.alias", ConfigType.STRING, "source", importance=Importance.HIGH, doc="the source cluster's name: target topics are <alias>.<topic> (DefaultReplicationPolicy)", validator=_alias),  # noqa: E501
        ConfigKey("source.cluster.bootstrap.servers", ConfigType.LIST, importance=Importance.HIGH, doc="the source cluster's brokers (host:port, comma-separated)", validator=non_empty),  # noqa: E501
        ConfigKey("source.cluster.security.protocol", ConfigType.STRING, "PLAINTEXT", importance=Importance.HIGH, doc="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", validator=one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),  # noqa: E501
        ConfigKey("source.cluster.sasl.mechanism", ConfigType.STRING, "", doc="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (required with SASL)", validator=one_of("", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),  # noqa: E501
        ConfigKey("source.cluster.sasl.username", ConfigType.STRING, "", doc="the SASL user name (an API key id)"),  # noqa: E501
        ConfigKey("source.cluster.sasl.password", ConfigType.PASSWORD, "", doc="its password (the key's secret)"),  # noqa: E501
        ConfigKey("source.cluster.sasl.jaas.config", ConfigType.PASSWORD, "", doc="or Java's JAAS line with username=\"...\" password=\"...\""),  # noqa: E501
        ConfigKey("source.cluster.ssl.ca.location", ConfigType.STRING, "", doc="a CA certificate file to verify the source brokers with (default: the system's)"),  # noqa: E501
        ConfigKey("source.cluster.ssl.endpoint.identification.algorithm", ConfigType.STRING, "https", doc="https: check the brokers' host names; none: do not", validator=one_of("https", "none")),  # noqa: E501
        ConfigKey("target.cluster.alias", ConfigType.STRING, "target", doc="this cluster's name: source topics named <target alias>.<topic> came from here and are not copied back", validator=_alias),  # noqa: E501
        ConfigKey("topics", ConfigType.LIST, [".*"], importance=Importance.HIGH, doc="regular expressions of the source topics to copy (internal topics never are)", validator=_regex_list),  # noqa: E501
        ConfigKey("topics.exclude", ConfigType.LIST, [], doc="regular expressions of source topics not to copy", validator=_regex_list),  # noqa: E501
        ConfigKey("groups", ConfigType.LIST, [".*"], doc="regular expressions of the source consumer groups whose offsets are translated", validator=_regex_list),  # noqa: E501
        ConfigKey("groups.exclude", ConfigType.LIST, ["console-consumer-.*", "connect-.*", "__.*"], doc="regular expressions of groups not to translate", validator=_regex_list),  # noqa: E501
        ConfigKey("replication.policy.class", ConfigType.STRING, DEFAULT_POLICY, doc="DefaultReplicationPolicy (<alias>.<topic>) or IdentityReplicationPolicy (the same name)", validator=one_of(DEFAULT_POLICY, IDENTITY_POLICY, "DefaultReplicationPolicy", "IdentityReplicationPolicy", case_sensitive=True)),  # noqa: E501
        ConfigKey("replication.policy.separator", ConfigType.STRING, ".", doc="what joins the alias and the topic name (DefaultReplicationPolicy)", validator=_separator),  # noqa: E501
        ConfigKey("emit.checkpoints.enabled", ConfigType.BOOLEAN, True, doc="write the groups' translated offsets to <alias>.checkpoints.internal"),  # noqa: E501
        ConfigKey("emit.checkpoints.interval.seconds", ConfigType.INT, 5, doc="how often offsets are translated (and records' target offsets confirmed)", validator=at_least(1)),  # noqa: E501
        ConfigKey("sync.group.offsets.enabled", ConfigType.BOOLEAN, True, doc="commit the translated offsets to the target's groups of the same name (only groups with no active members there)"),  # noqa: E501
        ConfigKey("sync.group.offsets.interval.seconds", ConfigType.INT, 5, doc="how often they are committed", validator=at_least(1)),  # noqa: E501
        ConfigKey("refresh.topics.interval.seconds", ConfigType.INT, 10, doc="how often new source topics and partitions are looked for", validator=at_least(1)),  # noqa: E501
        ConfigKey("admin.timeout.ms", ConfigType.LONG, 60_000, doc="how long a metadata or group request to either cluster may take", validator=at_least(1000)),  # noqa: E501
    ]
)  # fmt: skip

TASK_CONFIG = CONFIG.merged(
    ConfigDef(
        [
            ConfigKey(TASK_INDEX, ConfigType.INT, 0, doc="this task's number", validator=at_least(0)),  # noqa: E501
            ConfigKey(TASK_COUNT, ConfigType.INT, 1, doc="how many tasks share the partitions", validator=at_least(1)),  # noqa: E501
        ]
    )
)  # fmt: skip


# --- naming and filtering ---------------------------------------------------------------------


def syncs_topic(alias: str) -> str:
    return f"mm2-offset-syncs.{alias}.internal"


def checkpoints_topic(alias: str) -> str:
    return f"{alias}.checkpoints.internal"


def _full_policy(name: str) -> str:
    identity = name.rsplit(".", 1)[-1] == "IdentityReplicationPolicy"
    return IDENTITY_POLICY if identity else DEFAULT_POLICY


@dataclasses.dataclass(frozen=True)
class Naming:
    """Which source topics are copied and what they are called in the target."""

    alias: str
    identity: bool
    separator: str = "."
    target_alias: str = "target"
    include: tuple[str, ...] = (".*",)
    exclude: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Naming:
        return cls(
            alias=config["source.cluster.alias"],
            identity=_full_policy(config["replication.policy.class"]) == IDENTITY_POLICY,
            separator=config["replication.policy.separator"],
            target_alias=config["target.cluster.alias"],
            include=tuple(config["topics"]),
            exclude=tuple(config["topics.exclude"]),
        )

    def target_topic(self, topic: str) -> str:
        return topic if self.identity else f"{self.alias}{self.separator}{topic}"

    def mirrored(self, topic: str) -> bool:
        if INTERNAL_TOPICS.fullmatch(topic):
            return False
        if not self.identity and topic.startswith(f"{self.target_alias}{self.separator}"):
            return False  # a copy of one of the target's own topics: no cycles
        if not any(re.fullmatch(p, topic) for p in self.include):
            return False
        return not any(re.fullmatch(p, topic) for p in self.exclude)


def group_wanted(group: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    return any(re.fullmatch(p, group) for p in include) and not any(
        re.fullmatch(p, group) for p in exclude
    )


def owner(topic: str, partition: int, tasks: int) -> int:
    """The task that copies a partition: stable as topics come and go, and a topic's
    partitions go round the tasks."""
    return (zlib.crc32(topic.encode()) + partition) % tasks


# --- client settings --------------------------------------------------------------------------


def _jaas_credentials(jaas: str) -> dict[str, str]:
    found = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS.findall(jaas)}
    return {f"sasl.{k}": v for k, v in found.items()}


def source_client_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings for the source cluster from the parsed connector config."""
    conf: dict[str, Any] = {
        "bootstrap.servers": ",".join(config[SOURCE + "bootstrap.servers"]),
        "security.protocol": config[SOURCE + "security.protocol"].upper(),
    }
    if conf["security.protocol"].startswith("SASL"):
        conf["sasl.mechanism"] = config[SOURCE + "sasl.mechanism"].upper()
        conf.update(_jaas_credentials(config[SOURCE + "sasl.jaas.config"] or ""))
        for key in ("sasl.username", "sasl.password"):
            if config[SOURCE + key]:
                conf[key] = config[SOURCE + key]
    if conf["security.protocol"].endswith("SSL"):
        if config[SOURCE + "ssl.ca.location"]:
            conf["ssl.ca.location"] = config[SOURCE + "ssl.ca.location"]
        conf["ssl.endpoint.identification.algorithm"] = config[
            SOURCE + "ssl.endpoint.identification.algorithm"
        ]
    return conf


def target_client_config(worker: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka settings for the worker's own cluster (the target), from its config:
    the client keys, with Java's ``sasl.jaas.config`` translated."""
    conf: dict[str, Any] = {k: worker[k] for k in _WORKER_CLIENT_KEYS if k in worker}
    conf.update(_jaas_credentials(worker.get("sasl.jaas.config") or ""))
    return conf


def _hosts(servers: Iterable[str]) -> list[tuple[str, int | None]]:
    found: list[tuple[str, int | None]] = []
    for entry in servers:
        entry = entry.strip().lower()
        host, _, port = entry.rpartition(":") if re.search(r":\d+$", entry) else (entry, "", "")
        found.append((host.strip("[]"), int(port) if port else None))
    return found


# --- what is known of where records landed ------------------------------------------------


class OffsetSyncs:
    """Where one partition's records landed: (upstream, downstream) offset pairs, kept as
    runs in which both advance by one (a run breaks where upstream offsets have a gap).

    Pairs are added in the order records were written. A pair at or before an earlier one
    (a restarted task sending records again, a recreated topic) makes the store forget
    everything from there, so the pairs always grow in both offsets and every one of them
    says truly where a record is. At most ``limit`` runs are kept: beyond that, every other
    run of the older half is forgotten (translation then falls back on an earlier pair,
    which is still safe)."""

    def __init__(self, limit: int = MAX_RUNS) -> None:
        self.limit = max(limit, 2)
        self._runs: list[tuple[int, int, int]] = []  # (upstream, downstream, length)
        self._starts: list[int] = []  # each run's upstream offset, for bisect

    def __len__(self) -> int:
        return len(self._runs)

    def __bool__(self) -> bool:
        return bool(self._runs)

    def runs(self) -> Iterator[tuple[int, int, int]]:
        return iter(list(self._runs))

    def first(self) -> tuple[int, int] | None:
        return (self._runs[0][0], self._runs[0][1]) if self._runs else None

    def latest(self) -> tuple[int, int] | None:
        if not self._runs:
            return None
        u, d, n = self._runs[-1]
        return u + n - 1, d + n - 1

    def clear(self) -> None:
        self._runs.clear()
        self._starts.clear()

    def add(self, upstream: int, downstream: int, length: int = 1) -> None:
        """The records at ``upstream .. upstream+length-1`` are at ``downstream ...``."""
        if length <= 0 or upstream < 0 or downstream < 0:
            return
        if self._runs:
            u, d, n = self._runs[-1]
            if upstream < u + n or downstream < d + n:
                self.forget_from(upstream, downstream)
        if self._runs:
            u, d, n = self._runs[-1]
            if upstream == u + n and downstream == d + n:
                self._runs[-1] = (u, d, n + length)
                return
        self._runs.append((upstream, downstream, length))
        self._starts.append(upstream)
        if len(self._runs) > self.limit:
            half = len(self._runs) // 2
            self._runs = self._runs[:half:2] + self._runs[half:]
            self._starts = [r[0] for r in self._runs]

    def forget_from(self, upstream: int = sys.maxsize, downstream: int = sys.maxsize) -> None:
        """Forget every pair at or after ``upstream`` upstream or ``downstream`` downstream."""
        while self._runs:
            u, d, n = self._runs[-1]
            keep = min(n, upstream - u, downstream - d)
            if keep >= n:
                return
            if keep > 0:
                self._runs[-1] = (u, d, keep)
                return
            self._runs.pop()
            self._starts.pop()

    def translate(self, upstream: int) -> int | None:
        """The target offset a consumer whose next source record is ``upstream`` resumes
        at: ``d`` of the latest pair ``(u, d)`` with ``u <= upstream`` when ``u`` is
        ``upstream``, else ``d + 1``. None when no pair is that early."""
        i = bisect.bisect_right(self._starts, upstream) - 1
        if i < 0:
            return None
        u, d, n = self._runs[i]
        return d + (upstream - u) if upstream < u + n else d + n


def checkpoint_moves(previous: tuple[int, int] | None, upstream: int, downstream: int) -> bool:
    """Whether a group's checkpoint ``(upstream, downstream)`` is worth writing after
    ``previous``: it changed, and it does not go back downstream unless the group went
    back upstream (a translation from fewer known pairs must not rewind it)."""
    if previous is None:
        return True
    if previous == (upstream, downstream):
        return False
    return downstream >= previous[1] or upstream < previous[0]


@dataclasses.dataclass(eq=False)
class MirroredPartition:
    """A source partition a task copies: its target, and the records' target offsets,
    derived from acknowledgements and confirmed against the target's end offset."""

    topic: str
    partition: int
    target: str
    next_down: int  # the target offset the next acknowledged record gets (derived)
    syncs: OffsetSyncs = dataclasses.field(default_factory=OffsetSyncs)  # confirmed
    pending: OffsetSyncs = dataclasses.field(default_factory=OffsetSyncs)  # derived only
    sent: int = 0  # records handed to the worker
    acked: int = 0  # records the worker said were acknowledged (or dropped)
    draining_since: float | None = None  # new records held back since
    paused: bool = False  # its fetching paused while it drains
    held: list[Any] = dataclasses.field(default_factory=list)
    confirmed_once: bool = False
    source_partition: dict[str, Any] = dataclasses.field(default_factory=dict)

    def acknowledged(self, upstream: int) -> None:
        self.acked += 1
        self.pending.add(upstream, self.next_down)
        self.next_down += 1

    @property
    def quiet(self) -> bool:
        """Nothing sent for it is waiting for its acknowledgement."""
        return self.acked >= self.sent

    def confirm(self, end: int) -> list[tuple[int, int]] | None:
        """The target partition ends at ``end`` while nothing is in flight: keep the
        pending pairs if that is where the derivation says it ends (then the pairs to
        write to the offset-syncs topic), else forget them and count on from ``end``
        (None). The caller holds the lock that guards ``syncs``."""
        if end != self.next_down:
            self.pending.clear()
            self.next_down = end
            return None
        emit: list[tuple[int, int]] = []
        if not self.confirmed_once and (first := self.pending.first()) is not None:
            emit.append(first)
            self.confirmed_once = True
        latest = self.pending.latest()
        for u, d, n in self.pending.runs():
            self.syncs.add(u, d, n)
        self.pending.clear()
        if latest is not None and latest not in emit:
            emit.append(latest)
        return emit


def _error_code(exc: BaseException) -> Any:
    """The librdkafka error code a client exception carries (None if none)."""
    error = exc.args[0] if exc.args else None
    code = getattr(error, "code", None)
    return code() if callable(code) else None


def _json_key(**fields: Any) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def _json_value(upstream: int, downstream: int) -> bytes:
    return json.dumps({"upstream": upstream, "downstream": downstream},
                      separators=(",", ":")).encode()  # fmt: skip


# --- the connector ----------------------------------------------------------------------------


class MirrorSourceConnector(SourceConnector):
    version = VERSION
    doc = "Copies topics from another Kafka-protocol cluster into this one, with consumer group offsets translated (as MirrorMaker 2)."  # noqa: E501
    config_def = CONFIG

    def validate(self, config: Mapping[str, str]) -> dict[str, list[str]]:
        errors = super().validate(config)

        def add(key: str, message: str) -> None:
            errors.setdefault(key, []).append(message)

        known = {SOURCE + k for k in SOURCE_CLIENT_KEYS} | {SOURCE + "alias"}
        for key in config:
            if key.startswith(SOURCE) and key not in known:
                add(key, "not a source cluster setting this connector passes on (it takes "
                         + ", ".join(sorted(known)) + ")")  # fmt: skip
            elif key.startswith(TARGET) and key != TARGET + "alias":
                add(key, "the target is the worker's own cluster: its settings come from the "
                         "worker config")  # fmt: skip
        for side in ("key", "value"):
            name = (
                config.get(f"{side}.converter")
                or self.worker_config.get(f"{side}.converter")
                or "org.apache.kafka.connect.json.JsonConverter"
            ).strip()
            if name.rsplit(".", 1)[-1] != "ByteArrayConverter":
                add(f"{side}.converter", "the mirror copies bytes as they are: set "
                    f"{side}.converter={BYTE_ARRAY_CONVERTER}, not {name}")  # fmt: skip
        protocol = (config.get(SOURCE + "security.protocol") or "PLAINTEXT").strip().upper()
        if protocol.startswith("SASL") and not errors.get(SOURCE + "security.protocol"):
            if not (config.get(SOURCE + "sasl.mechanism") or "").strip():
                add(SOURCE + "sasl.mechanism", f"required with {protocol}")
            jaas = _jaas_credentials(config.get(SOURCE + "sasl.jaas.config") or "")
            for key in ("sasl.username", "sasl.password"):
                if not (config.get(SOURCE + key) or "").strip() and key not in jaas:
                    add(SOURCE + key, f"required with {protocol}")
        servers = [s.strip() for s in (config.get(SOURCE + "bootstrap.servers") or "").split(",")]
        servers = [s for s in servers if s]
        if servers:
            for message in self._server_errors(servers, config):
                add(SOURCE + "bootstrap.servers", message)
        return errors

    def _server_errors(self, servers: list[str], config: Mapping[str, str]) -> list[str]:
        found = []
        allowed = {
            entry.strip().lower()
            for entry in (self.worker_config.get(ALLOWED_HOSTS) or "").split(",")
            if entry.strip()
        }
        for host, port in _hosts(servers):
            if allowed and host not in allowed and f"{host}:{port}" not in allowed:
                found.append(f"{host}:{port} is not among the hosts this worker may connect to")
        worker = target_client_config(self.worker_config)
        same_servers = set(_hosts(servers)) & set(
            _hosts((worker.get("bootstrap.servers") or "").split(","))
        )
        user = (config.get(SOURCE + "sasl.username") or "").strip() or _jaas_credentials(
            config.get(SOURCE + "sasl.jaas.config") or ""
        ).get("sasl.username", "")
        if same_servers and user == worker.get("sasl.username", ""):
            found.append("the source is the worker's own cluster, as the same principal: "
                         "the mirror would copy its own copies")  # fmt: skip
        return found

    def task_class(self) -> type[SourceTask]:
        # Tasks write to the worker's cluster with the worker's credentials, which they
        # are not given in their config (a task config is stored and shown through the
        # REST API): the class handed to this worker carries them.
        carried = {"worker_config": dict(self.worker_config)}
        bound = type("MirrorSourceTask", (MirrorSourceTask,), carried)
        return cast(type[SourceTask], bound)

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [
            {**self.raw, TASK_INDEX: str(i), TASK_COUNT: str(max_tasks)} for i in range(max_tasks)
        ]


# --- the task ---------------------------------------------------------------------------------


class MirrorSourceTask(SourceTask):
    config_def = TASK_CONFIG
    worker_config: ClassVar[Mapping[str, str]] = {}  # set on the class the connector hands out

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()  # guards _parts' membership, each one's syncs, _wanted
        self._stop = threading.Event()
        self._parts: dict[tuple[str, int], MirroredPartition] = {}
        self._wanted: dict[tuple[str, int], str] = {}  # set by the refresher, applied by poll
        self._seeds: dict[tuple[str, int], list[tuple[int, int]]] = {}  # from the syncs topic
        self._checkpoints: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._translated: dict[str, dict[tuple[str, int], int]] = {}
        self._thread: threading.Thread | None = None
        self._next_confirm = 0.0
        self._consumer: Any = None
        self._producer: Any = None
        self._source_admin: Any = None
        self._target_admin: Any = None

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, config: Mapping[str, str]) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        super().start(config)
        c = self.config
        self.naming = Naming.from_config(c)
        self.alias = c["source.cluster.alias"]
        self.index, self.count = c[TASK_INDEX], c[TASK_COUNT]
        self.timeout = c["admin.timeout.ms"] / 1000
        name = f"mirror-{config.get('name') or self.alias}-{self.index}"
        source = source_client_config(c)
        target = target_client_config(self.worker_config)
        if not target.get("bootstrap.servers"):
            raise ConnectException("the mirror task has no target cluster (worker config)")
        self._source_admin = AdminClient(source | {"client.id": f"{name}-source-admin"})
        self._target_admin = AdminClient(target | {"client.id": f"{name}-target-admin"})
        self._producer = Producer(
            target | {"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                      "client.id": f"{name}-syncs"}
        )  # fmt: skip
        self._consumer = Consumer(
            source
            | {
                # Never joins nor commits: the group id only because librdkafka wants one.
                "group.id": f"__mirror-{self.alias}-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "client.id": f"{name}-source",
            }
        )
        self._ensure_topics({syncs_topic(self.alias): (1, True),
                             checkpoints_topic(self.alias): (1, True)})  # fmt: skip
        self._seeds = self._read_syncs()
        try:
            self._refresh_topics()
        except Exception as exc:
            raise ConnectException(f"cannot read the source cluster's topics: {exc}") from exc
        self._next_confirm = time.monotonic() + c["emit.checkpoints.interval.seconds"]
        self._thread = threading.Thread(target=self._background, name=f"{name}-offsets",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)  # a daemon: one stuck in a slow admin request is left behind
        if self._producer is not None:
            self._producer.flush(5)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # --- records ----------------------------------------------------------------------------

    def poll(self) -> Sequence[ConnectRecord]:
        if self._stop.is_set():
            return []
        self._apply_assignment()
        now = time.monotonic()
        if now >= self._next_confirm:
            self._next_confirm = now + self.config["emit.checkpoints.interval.seconds"]
            for part in self._parts.values():
                if part.pending and part.draining_since is None:
                    part.draining_since = now
        messages = self._finish_confirmations()
        if not self._parts:
            self._stop.wait(0.2)
            return []
        draining = any(p.draining_since is not None for p in self._parts.values())
        for message in self._consumer.consume(BATCH, 0.05 if draining else 0.5):
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise ConnectException(f"reading the source cluster: {error}")
                logger.info("mirror %s: %s", self.alias, error)
                continue
            mirrored = self._parts.get((message.topic(), message.partition()))
            if mirrored is None:
                continue  # no longer ours
            if mirrored.draining_since is not None:
                mirrored.held.append(message)
            else:
                messages.append(message)
        records = [self._record(m) for m in messages]
        for m in messages:
            self._parts[(m.topic(), m.partition())].sent += 1
        return records

    def _record(self, message: Any) -> ConnectRecord:
        part = self._parts[(message.topic(), message.partition())]
        kind, stamp = message.timestamp()
        return ConnectRecord(
            topic=part.target,
            partition=part.partition,
            key_schema=OPTIONAL_BYTES_SCHEMA,
            key=message.key(),
            value_schema=OPTIONAL_BYTES_SCHEMA,
            value=message.value(),
            timestamp=stamp if kind != 0 else None,  # 0: TIMESTAMP_NOT_AVAILABLE
            headers=tuple(message.headers() or ()),
            source_partition=part.source_partition,
            source_offset={"offset": message.offset()},
        )

    def commit_record(self, record: ConnectRecord) -> None:
        source = record.source_partition
        if source is None or record.source_offset is None:
            return
        part = self._parts.get((source["topic"], source["partition"]))
        if part is not None and part.source_partition is source:
            part.acknowledged(int(record.source_offset["offset"]))

    # --- confirming where records landed ----------------------------------------------------

    def _finish_confirmations(self) -> list[Any]:
        """Confirm the draining partitions that are quiet now; the records held back for
        those and for ones drained too long, to send now (in order, before newer ones)."""
        from confluent_kafka import TopicPartition

        draining = [p for p in self._parts.values() if p.draining_since is not None]
        if not draining:
            return []
        now = time.monotonic()
        quiet = [p for p in draining if p.quiet]
        done: list[MirroredPartition] = []
        if quiet:
            try:
                ends = self._end_offsets([(p.target, p.partition) for p in quiet], timeout=5.0)
            except Exception as exc:  # noqa: BLE001 - confirmed at the next interval
                logger.warning("mirror %s: target end offsets unknown (%s)", self.alias, exc)
                ends = {}
            for part in quiet:
                end = ends.get((part.target, part.partition))
                if end is not None:
                    self._confirm(part, end)
                done.append(part)
        for part in draining:
            if part in done:
                continue
            if now - (part.draining_since or now) > DRAIN_TIMEOUT_S:
                logger.warning("mirror %s: %s-%d not acknowledged in %.0f s; confirming later",
                               self.alias, part.topic, part.partition, DRAIN_TIMEOUT_S)  # fmt: skip
                done.append(part)
            elif not part.paused:  # no more fetching meanwhile: what is held stays small
                self._consumer.pause([TopicPartition(part.topic, part.partition)])
                part.paused = True
        released: list[Any] = []
        for part in done:
            if part.paused:  # fetching resumes after the last record handed over (held)
                self._consumer.resume([TopicPartition(part.topic, part.partition)])
                part.paused = False
            part.draining_since = None
            released += part.held
            part.held = []
        return released

    def _confirm(self, part: MirroredPartition, end: int) -> None:
        expected = part.next_down
        with self._lock:
            emit = part.confirm(end)
        if emit is None:
            logger.warning(
                "mirror %s: %s-%d ends at %d, not at %d as derived (another writer, or a "
                "dropped record): forgetting the unconfirmed offset pairs",
                self.alias, part.target, part.partition, end, expected,
            )  # fmt: skip
            return
        key = _json_key(topic=part.topic, partition=part.partition)
        for upstream, downstream in emit:
            self._produce(syncs_topic(self.alias), key, _json_value(upstream, downstream))

    def _produce(self, topic: str, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def _end_offsets(
        self, partitions: Iterable[tuple[str, int]], timeout: float
    ) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}  # type: ignore[no-untyped-call]
        if not wanted:
            return {}
        futures = self._target_admin.list_offsets(wanted, request_timeout=timeout)
        found = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result(timeout).offset
            except Exception as exc:  # noqa: BLE001 - left out: asked again later
                logger.info("mirror %s: end of %s-%d: %s", self.alias, tp.topic, tp.partition, exc)
        return found

    # --- partitions -------------------------------------------------------------------------

    def _apply_assignment(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        with self._lock:
            wanted = dict(self._wanted)
        gone = [key for key in self._parts if key not in wanted]
        if gone:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in gone])
            with self._lock:
                for key in gone:
                    del self._parts[key]
        new = [key for key in wanted if key not in self._parts]
        if not new:
            return
        try:
            ends = self._end_offsets([(wanted[k], k[1]) for k in new], timeout=5.0)
        except Exception as exc:  # noqa: BLE001 - a topic just created: the next poll retries
            logger.info("mirror %s: target partitions not ready yet (%s)", self.alias, exc)
            return
        assign = []
        for topic, partition in new:
            end = ends.get((wanted[(topic, partition)], partition))
            if end is None or end < 0:
                continue
            part = MirroredPartition(topic, partition, wanted[(topic, partition)], end)
            part.source_partition = {"cluster": self.alias, "topic": topic, "partition": partition}
            for upstream, downstream in self._seeds.pop((topic, partition), []):
                part.syncs.add(upstream, downstream)
            part.syncs.forget_from(downstream=end)  # pairs beyond a truncated target
            assert self.context is not None
            stored = self.context.offset(part.source_partition)
            start = int(stored["offset"]) + 1 if stored else OFFSET_BEGINNING
            assign.append(TopicPartition(topic, partition, start))
            with self._lock:
                self._parts[(topic, partition)] = part
        if assign:
            self._consumer.incremental_assign(assign)
            logger.info("mirror %s: copying %s", self.alias,
                        ", ".join(f"{tp.topic}-{tp.partition}" for tp in assign))  # fmt: skip

    def _refresh_topics(self) -> None:
        """Find the source topics to copy and this task's partitions of them; create or
        grow their target topics; hand the partitions to poll."""
        metadata = self._source_admin.list_topics(timeout=self.timeout)
        found = {
            name: len(info.partitions)
            for name, info in metadata.topics.items()
            if info.error is None and info.partitions and self.naming.mirrored(name)
        }
        mine = {
            name: count
            for name, count in found.items()
            if any(owner(name, p, self.count) == self.index for p in range(count))
        }
        if mine:
            self._ensure_target_topics(mine)
        targets = self._target_partitions()
        wanted = {
            (name, p): self.naming.target_topic(name)
            for name, count in mine.items()
            for p in range(count)
            if owner(name, p, self.count) == self.index
            and p < targets.get(self.naming.target_topic(name), 0)
        }
        with self._lock:
            self._wanted = wanted

    def _target_partitions(self) -> dict[str, int]:
        metadata = self._target_admin.list_topics(timeout=self.timeout)
        return {
            name: len(info.partitions)
            for name, info in metadata.topics.items()
            if info.error is None
        }

    def _ensure_target_topics(self, topics: Mapping[str, int]) -> None:
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            ConfigResource,
            NewPartitions,
        )

        existing = self._target_partitions()
        missing = [t for t in topics if self.naming.target_topic(t) not in existing]
        compacted: dict[str, bool] = {}
        if missing:
            futures = self._source_admin.describe_configs(
                [ConfigResource("topic", t) for t in missing], request_timeout=self.timeout
            )
            for resource, future in futures.items():
                try:
                    entries = future.result(self.timeout)
                    policy = entries.get("cleanup.policy")
                    compacted[resource.name] = policy is not None and "compact" in str(policy.value)
                except Exception as exc:  # noqa: BLE001 - created as a plain topic
                    logger.warning("mirror %s: configs of %s unknown (%s)", self.alias,
                                   resource.name, exc)  # fmt: skip
            self._ensure_topics({
                self.naming.target_topic(t): (topics[t], compacted.get(t, False)) for t in missing
            })  # fmt: skip
        grow = [
            NewPartitions(self.naming.target_topic(t), n)
            for t, n in topics.items()
            if 0 < existing.get(self.naming.target_topic(t), 0) < n
        ]
        if grow:
            for topic, future in self._target_admin.create_partitions(
                grow, request_timeout=self.timeout
            ).items():
                try:
                    future.result(self.timeout)
                    logger.info("mirror %s: %s has more partitions now", self.alias, topic)
                except Exception as exc:  # noqa: BLE001 - another task did, or it is refused
                    logger.warning("mirror %s: growing %s: %s", self.alias, topic, exc)

    def _ensure_topics(self, topics: Mapping[str, tuple[int, bool]]) -> None:
        """Create these target topics (partitions, compacted) unless they exist."""
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        if not topics:
            return
        new = [
            NewTopic(name, partitions, replication_factor=-1,
                     config={"cleanup.policy": "compact"} if compact else {})
            for name, (partitions, compact) in topics.items()
        ]  # fmt: skip
        futures = self._target_admin.create_topics(new, request_timeout=self.timeout)
        for name, future in futures.items():
            try:
                future.result(self.timeout)
                logger.info("mirror %s: created %s", self.alias, name)
            except Exception as exc:
                if _error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise ConnectException(f"cannot create topic {name}: {exc}") from exc

    def _read_syncs(self) -> dict[tuple[str, int], list[tuple[int, int]]]:
        """The offset pairs in the offset-syncs topic, per source partition, in order."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        found: dict[tuple[str, int], list[tuple[int, int]]] = {}
        topic = syncs_topic(self.alias)
        consumer = Consumer(
            target_client_config(self.worker_config)
            | {
                "group.id": f"__mirror-{self.alias}-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "client.id": f"mirror-{self.alias}-{self.index}-syncs-reader",
            }
        )
        try:
            ends = self._end_offsets([(topic, 0)], timeout=self.timeout)
            end = ends.get((topic, 0), 0)
            if end <= 0:
                return found
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + self.timeout
            position = 0
            while position < end and time.monotonic() < deadline:
                for message in consumer.consume(BATCH, 0.5):
                    offset = message.offset()
                    if message.error() is not None or offset is None:
                        continue
                    position = offset + 1
                    try:
                        key, value = (
                            json.loads(message.key() or b""),
                            json.loads(message.value() or b""),
                        )
                        pair = (int(value["upstream"]), int(value["downstream"]))
                        where = (str(key["topic"]), int(key["partition"]))
                    except (TypeError, ValueError, KeyError):
                        continue  # not ours
                    found.setdefault(where, []).append(pair)
                if position < end:
                    got = consumer.position([TopicPartition(topic, 0)])[0].offset
                    position = max(position, got)
            if position < end:
                logger.warning("mirror %s: %s not read to its end; translating from less",
                               self.alias, topic)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - fewer known pairs: translation is still safe
            logger.warning("mirror %s: reading %s: %s", self.alias, topic, exc)
        finally:
            consumer.close()
        return found

    # --- groups -----------------------------------------------------------------------------

    def _background(self) -> None:
        c = self.config
        translate = c["emit.checkpoints.enabled"] or c["sync.group.offsets.enabled"]
        now = time.monotonic()
        due = {
            "refresh": now + c["refresh.topics.interval.seconds"],
            "checkpoint": now + c["emit.checkpoints.interval.seconds"],
            "sync": now + c["sync.group.offsets.interval.seconds"],
        }
        every = {
            "refresh": c["refresh.topics.interval.seconds"],
            "checkpoint": c["emit.checkpoints.interval.seconds"],
            "sync": c["sync.group.offsets.interval.seconds"],
        }
        work = {"refresh": self._refresh_topics, "checkpoint": self._checkpoint,
                "sync": self._sync_groups}  # fmt: skip
        if not translate:
            del due["checkpoint"]
        if not c["sync.group.offsets.enabled"]:
            del due["sync"]
        while not self._stop.wait(max(0.05, min(due.values()) - time.monotonic())):
            for what, when in list(due.items()):
                if time.monotonic() < when or self._stop.is_set():
                    continue
                try:
                    work[what]()
                except Exception as exc:  # noqa: BLE001 - tried again at the next interval
                    logger.warning("mirror %s: %s failed: %s", self.alias, what, exc)
                due[what] = time.monotonic() + every[what]

    def _group_offsets(
        self, admin: Any, groups: Sequence[str]
    ) -> dict[str, dict[tuple[str, int], int]]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = {
            group: admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout
            )[group]
            for group in groups
        }
        found: dict[str, dict[tuple[str, int], int]] = {}
        for group, future in futures.items():
            try:
                result = future.result(self.timeout)
            except Exception as exc:  # noqa: BLE001 - the next interval asks again
                logger.info("mirror %s: offsets of group %s: %s", self.alias, group, exc)
                continue
            found[group] = {
                (tp.topic, tp.partition): tp.offset
                for tp in result.topic_partitions or []
                if tp.error is None and tp.offset >= 0
            }
        return found

    def _checkpoint(self) -> None:
        """Translate the source groups' offsets of this task's partitions; write the
        checkpoints that moved."""
        c = self.config
        listed = self._source_admin.list_consumer_groups(request_timeout=self.timeout)
        groups = [
            g.group_id
            for g in listed.result(self.timeout).valid
            if group_wanted(g.group_id, c["groups"], c["groups.exclude"])
        ]
        offsets = self._group_offsets(self._source_admin, groups)
        translated: dict[str, dict[tuple[str, int], int]] = {}
        for group, committed in offsets.items():
            for (topic, partition), upstream in committed.items():
                with self._lock:
                    part = self._parts.get((topic, partition))
                    downstream = part.syncs.translate(upstream) if part is not None else None
                if part is None or downstream is None:
                    continue
                translated.setdefault(group, {})[(part.target, partition)] = downstream
                key = (group, part.target, partition)
                if c["emit.checkpoints.enabled"] and checkpoint_moves(
                    self._checkpoints.get(key), upstream, downstream
                ):
                    self._produce(
                        checkpoints_topic(self.alias),
                        _json_key(group=group, topic=part.target, partition=partition),
                        _json_value(upstream, downstream),
                    )
                    self._checkpoints[key] = (upstream, downstream)
        with self._lock:
            self._translated = translated

    def _sync_groups(self) -> None:
        """Commit the translated offsets to the target's groups of the same names that
        have no active members there, where that moves them forward."""
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition

        with self._lock:
            translated = {g: dict(o) for g, o in self._translated.items() if o}
        if not translated:
            return
        idle, absent = [], []
        described = self._target_admin.describe_consumer_groups(
            list(translated), request_timeout=self.timeout
        )
        for group, future in described.items():
            try:
                if not future.result(self.timeout).members:
                    idle.append(group)
            except Exception as exc:  # noqa: BLE001 - not found: a group to create
                if _error_code(exc) == KafkaError.GROUP_ID_NOT_FOUND:
                    absent.append(group)
                else:
                    logger.info("mirror %s: group %s on the target: %s", self.alias, group, exc)
        current = self._group_offsets(self._target_admin, idle)
        current.update({group: {} for group in absent})
        for group in [*idle, *absent]:
            if group not in current:
                continue  # its offsets could not be read
            forward = [
                TopicPartition(topic, partition, offset)
                for (topic, partition), offset in sorted(translated[group].items())
                if offset > current[group].get((topic, partition), -1)
            ]
            if not forward:
                continue
            futures = self._target_admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, forward)], request_timeout=self.timeout
            )
            try:
                futures[group].result(self.timeout)
                moved = ", ".join(f"{t.topic}-{t.partition}:{t.offset}" for t in forward)
                logger.info("mirror %s: group %s now at %s", self.alias, group, moved)
            except Exception as exc:  # noqa: BLE001 - e.g. a member joined meanwhile
                logger.info("mirror %s: committing group %s: %s", self.alias, group, exc)
