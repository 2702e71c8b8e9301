"""HTTP sink: sends the records of topics to an HTTP endpoint (webhooks).

Configured as Confluent's HTTP Sink connector where the two share a setting
(``http.api.url``, ``request.method``, ``headers``, ``header.separator``, ``auth.type``,
``connection.user``, ``connection.password``, ``bearer.token``, ``request.body.format``,
``batch.max.size``, ``max.retries``, ``retry.backoff.ms``, ``retry.on.status.codes``,
``behavior.on.error``, ``behavior.on.null.values``), so its configs carry over.

* Bodies (``request.body.format``). ``json`` (the default): each record's value as JSON: a
  struct with its schema as an object (Kafka's ``JsonConverter`` without the schema
  envelope; decimals as JSON numbers, or with ``decimal.format=BASE64`` as Kafka's base64
  of their unscaled bytes), a map or an array as JSON, a string as a JSON string, bytes as
  a base64 string; with ``batch.max.size`` 1 the body is that value, with more a JSON
  array of up to ``batch.max.size`` values, in the order they were read (the last request
  of a flush may hold fewer). ``Content-Type: application/json``.
  ``string``: one request per record (``batch.max.size`` must be 1), the value as text: a
  string as UTF-8 (``text/plain; charset=utf-8``), bytes as they are
  (``application/octet-stream``), anything else as JSON (``application/json``). A
  ``Content-Type`` in ``headers`` wins.
* Null values (tombstones), by ``behavior.on.null.values``: ``ignore`` (the default)
  skips them, ``log`` skips them with a warning, ``fail`` fails the task. Skipped records
  count as delivered.
* Headers. Each request carries ``X-Millrace-Topic``, ``X-Millrace-Partition`` and
  ``X-Millrace-Offset`` of its (first) record, and ``X-Millrace-Delivery``: a UUID that is
  the same for every attempt of a request and, for records read from Kafka, derived from
  the connector's name and the records' topics, partitions and offsets, so a request sent
  again (a retry after a timeout, or after the task restarted) carries the same id and a
  receiver can drop duplicates by it. ``headers`` adds ``Name:Value`` pairs separated by
  ``header.separator`` (``|``); it may not set ``Host``, ``Content-Length``,
  ``Transfer-Encoding``, ``Connection`` or ``X-Millrace-*``, nor ``Authorization`` when
  ``auth.type`` sets one. ``auth.type=basic`` sends ``connection.user`` and
  ``connection.password`` as HTTP Basic credentials, ``auth.type=bearer`` sends
  ``Authorization: Bearer <bearer.token>``.
* Signatures. With ``hmac.secret``, each attempt carries ``X-Millrace-Signature:
  t=<unix seconds>,v1=<hex>``, the hex being HMAC-SHA256 under the secret of
  ``<t>.<body>`` (the decimal ``t``, a dot, then the body's bytes). A receiver recomputes
  it, compares in constant time, and refuses a ``t`` too far from its clock (replays).
* Delivery (at least once). ``put`` buffers the records in order and sends each full
  request of ``batch.max.size`` records at once (with the default of 1: every record);
  the rest waits for more records or for ``flush``/``pre_commit``, which send everything
  buffered, in order, one request at a time over one keep-alive connection per task
  (reopened after an error). A request is delivered once it got a 2xx answer; the next
  one is sent only then, so records of a partition arrive in order.
  ``pre_commit`` returns, for each partition, the offset of its first record not yet
  delivered (the worker's offset when all are), so the group's offsets never pass an
  undelivered record and a crash sends records again, never skips them.
* Failures. Status codes in ``retry.on.status.codes`` (``408,429,5xx``: codes and
  classes) and connection failures (refused, reset, timed out after
  ``request.timeout.ms``, TLS errors) are retried, at most ``max.retries`` times, after
  ``retry.backoff.ms`` doubled at each retry up to ``retry.backoff.max.ms``, with jitter
  (a random wait between half and all of it); on a 429 or 503 a ``Retry-After`` (seconds
  or an HTTP date) replaces the back-off, capped by ``retry.backoff.max.ms``. Any other
  status, redirects included (they are not followed), fails at once. A request that fails
  (at once, or once its retries are spent) is handled by ``behavior.on.error``: ``fail``
  (the default) fails the task with a :class:`ConnectException` naming the status, the
  URL and the records (and sends nothing more: the ``pre_commit`` the worker makes on its
  way out commits only the offsets before them); ``log`` skips its records with a
  warning; ``ignore`` skips them. A server that could not be reached after the retries
  never loses records nor fails the task: they stay buffered, ``put`` raises
  :class:`RetriableException` (the worker calls it again with the same records after a
  back-off; records it already took are not taken twice) and ``pre_commit`` commits only
  up to them. ``stop`` (from any thread) wakes a back-off and breaks off a request
  waiting for its answer at once (a connection being opened still takes up to
  ``request.timeout.ms``); what is buffered is then neither sent nor committed. A value
  that cannot be written (a struct that does not fit its schema) is handled by
  ``behavior.on.error`` too.
* Hosted workers. A worker that sets ``http.allowed.hosts`` in its worker config (a
  comma-separated list of ``host`` or ``host:port``; IPv6 as ``[::1]:8080``) refuses
  any other host in ``http.api.url`` (``validate`` names the key; the connector checks
  again when it starts). Without it any host is allowed. URLs with credentials
  (``user:pass@``) are refused everywhere: credentials go in ``connection.user`` and
  ``connection.password``.
* Secrets. ``connection.password``, ``bearer.token`` and ``hmac.secret`` are never
  logged, nor is the ``Authorization`` header, any ``headers`` value, a body, or the
  URL's query: errors and logs show ``scheme://host:port/path``. Text quoted from a
  response is cleaned of the secrets before it is logged.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import email.utils
import hashlib
import hmac
import http.client
import logging
import random
import re
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from data_plane.connect.api import (
    ConnectException,
    RetriableException,
    SinkConnector,
    SinkTask,
    TopicPartition,
)
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
from data_plane.connect.converters import JsonConverter
from data_plane.connect.data import ConnectRecord, DataException, Struct

logger = logging.getLogger(__name__)

ALLOWED_HOSTS = "http.allowed.hosts"  # the worker config key

METHODS = ("POST", "PUT", "PATCH")
AUTH_TYPES = ("none", "basic", "bearer")
BODY_FORMATS = ("json", "string")
ERROR_BEHAVIORS = ("fail", "log", "ignore")
NULL_BEHAVIORS = ("ignore", "log", "fail")

SIGNATURE_HEADER = "X-Millrace-Signature"
DELIVERY_HEADER = "X-Millrace-Delivery"
TOPIC_HEADER = "X-Millrace-Topic"
PARTITION_HEADER = "X-Millrace-Partition"
OFFSET_HEADER = "X-Millrace-Offset"
USER_AGENT = "millrace-http-sink/1.0"

# Headers http.client or this connector set: not for ``headers``.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_STATUS_CODE = re.compile(r"[1-5][0-9][0-9]")
_STATUS_CLASS = re.compile(r"[1-5]xx", re.IGNORECASE)
_DELIVERY_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "millrace:connect:http-sink")
_RESPONSE_READ_MAX = 64 * 1024  # more than this and the connection is dropped, not drained
_EXCERPT_CHARS = 200
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
OCTETS = "application/octet-stream"


# --- URLs, headers, status codes ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where requests go: ``http.api.url`` taken apart."""

    scheme: str
    host: str
    port: int
    path: str
    query: str = dataclasses.field(default="", repr=False)  # may hold a token: never shown

    @property
    def target(self) -> str:
        """The request target: the path and the query."""
        return self.path + (f"?{self.query}" if self.query else "")

    @property
    def display(self) -> str:
        """The URL as logs and errors show it (no query)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}" + ("?…" if self.query else "")


def parse_url(url: str) -> Endpoint:
    """``http.api.url`` taken apart; ``ValueError`` (never quoting the URL) if it is not an
    http:// or https:// URL with a host."""
    text = url.strip()
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError("must not contain spaces or control characters")
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        shown = f"{scheme}://" if scheme else "no scheme"
        raise ValueError(f"must be an http:// or https:// URL, not {shown}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "credentials in the URL are not allowed: set auth.type, connection.user and "
            "connection.password"
        )
    if not parts.hostname:
        raise ValueError(f"no host: expected {scheme}://host[:port]/path")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise ValueError("the port is not a number from 1 to 65535") from None
    if port == 0:
        raise ValueError("the port is not a number from 1 to 65535")
    return Endpoint(scheme, parts.hostname.lower(), port, parts.path or "/", parts.query)


def host_error(host: str, port: int, worker_config: Mapping[str, str]) -> str | None:
    """Why ``host:port`` may not be used by a connector on this worker (None: it may)."""
    allowed = {
        entry.strip().lower()
        for entry in (worker_config.get(ALLOWED_HOSTS) or "").split(",")
        if entry.strip()
    }
    if not allowed:
        return None
    host = host.strip().lower()
    bracketed = f"[{host}]" if ":" in host else host
    if allowed & {host, bracketed, f"{bracketed}:{port}"}:
        return None
    return f"{bracketed}:{port} is not among the hosts this worker may send to"


def parse_headers(text: str, separator: str) -> list[tuple[str, str]]:
    """``headers`` as (name, value) pairs; ``ValueError`` naming the header (never its
    value, which may be a key) if one is malformed or reserved."""
    found: list[tuple[str, str]] = []
    for position, entry in enumerate(text.split(separator), start=1):
        if not entry.strip():
            continue
        name, colon, value = entry.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not _TOKEN.fullmatch(name):
            raise ValueError(
                f"header {position} is not Name:Value (separated by {separator!r}) with a "
                "valid name"
            )
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"the value of header {name!r} holds a line break or NUL")
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith("x-millrace-"):
            raise ValueError(f"header {name!r} is set by the connector, not by headers")
        found.append((name, value))
    return found


def _check_url(name: str, value: Any) -> None:
    try:
        parse_url(str(value))
    except ValueError as exc:
        raise ConfigException(name, str(exc)) from None


def _check_status_codes(name: str, value: Any) -> None:
    for entry in value:
        if not (_STATUS_CODE.fullmatch(entry) or _STATUS_CLASS.fullmatch(entry)):
            raise ConfigException(
                name, f"{entry!r} is neither a status code (503) nor a class of them (5xx)"
            )


def parse_status_codes(entries: Sequence[str]) -> tuple[frozenset[int], frozenset[int]]:
    """``retry.on.status.codes`` as (codes, classes): ``408,5xx`` is ({408}, {5})."""
    codes = frozenset(int(e) for e in entries if _STATUS_CODE.fullmatch(e))
    classes = frozenset(int(e[0]) for e in entries if _STATUS_CLASS.fullmatch(e))
    return codes, classes


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (None if absent or unreadable)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``X-Millrace-Signature`` value of ``body`` signed at ``timestamp``."""
    mac = hmac.new(secret, f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


# --- configuration ------------------------------------------------------------------------------

CONFIG_DEF = ConfigDef(
    [
        ConfigKey("http.api.url", ConfigType.STRING, importance=Importance.HIGH, validator=_check_url, doc="the endpoint records are sent to: http(s)://host[:port]/path[?query]; a worker's http.allowed.hosts limits the hosts; no credentials in the URL"),  # noqa: E501
        ConfigKey("request.method", ConfigType.STRING, "POST", importance=Importance.HIGH, validator=one_of(*METHODS), doc="the HTTP method: POST, PUT or PATCH"),  # noqa: E501
        ConfigKey("headers", ConfigType.STRING, "", doc="extra request headers, Name:Value pairs separated by header.separator (X-Tenant:acme|X-Source:kafka); values are never logged"),  # noqa: E501
        ConfigKey("header.separator", ConfigType.STRING, "|", validator=non_empty, doc="what separates the pairs of headers"),  # noqa: E501
        ConfigKey("auth.type", ConfigType.STRING, "none", importance=Importance.HIGH, validator=one_of(*AUTH_TYPES), doc="none, basic (connection.user and connection.password) or bearer (bearer.token)"),  # noqa: E501
        ConfigKey("connection.user", ConfigType.STRING, None, importance=Importance.HIGH, doc="the user of auth.type=basic"),  # noqa: E501
        ConfigKey("connection.password", ConfigType.PASSWORD, None, importance=Importance.HIGH, doc="the password of auth.type=basic (never logged)"),  # noqa: E501
        ConfigKey("bearer.token", ConfigType.PASSWORD, None, importance=Importance.HIGH, doc="the token of auth.type=bearer, sent as Authorization: Bearer <token> (never logged)"),  # noqa: E501
        ConfigKey("hmac.secret", ConfigType.PASSWORD, None, doc="sign each request: X-Millrace-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'> (never logged; unset: unsigned)"),  # noqa: E501
        ConfigKey("request.body.format", ConfigType.STRING, "json", validator=one_of(*BODY_FORMATS), doc="json: the value as JSON (an array of up to batch.max.size values when that is more than 1); string: one request per record, the value as text"),  # noqa: E501
        ConfigKey("batch.max.size", ConfigType.INT, 1, validator=at_least(1), doc="records per request: 1 sends each value alone, more send JSON arrays of up to this many values (json only)"),  # noqa: E501
        ConfigKey("decimal.format", ConfigType.STRING, "NUMERIC", validator=one_of("NUMERIC", "BASE64"), doc="Decimal values in JSON bodies as numbers (NUMERIC) or as Kafka's base64 of their unscaled bytes (BASE64)"),  # noqa: E501
        ConfigKey("max.retries", ConfigType.INT, 10, validator=at_least(0), doc="retries of a request that failed with a status of retry.on.status.codes or a connection error"),  # noqa: E501
        ConfigKey("retry.backoff.ms", ConfigType.INT, 300, validator=at_least(0), doc="ms before the first retry, doubled at each one (with jitter: a random wait between half and all of it)"),  # noqa: E501
        ConfigKey("retry.backoff.max.ms", ConfigType.INT, 10_000, validator=at_least(0), doc="the longest wait between retries, a Retry-After header's included"),  # noqa: E501
        ConfigKey("request.timeout.ms", ConfigType.INT, 30_000, validator=at_least(1), doc="ms to connect, and to wait for each read of an answer"),  # noqa: E501
        ConfigKey("retry.on.status.codes", ConfigType.LIST, ["408", "429", "5xx"], validator=_check_status_codes, doc="status codes retried: codes (503) and classes (5xx); other non-2xx codes fail at once"),  # noqa: E501
        ConfigKey("behavior.on.error", ConfigType.STRING, "fail", validator=one_of(*ERROR_BEHAVIORS), doc="a request that failed (after its retries): fail the task (fail), skip its records with a warning (log) or skip them (ignore)"),  # noqa: E501
        ConfigKey("behavior.on.null.values", ConfigType.STRING, "ignore", validator=one_of(*NULL_BEHAVIORS), doc="a null value (tombstone): skip it (ignore), skip it with a warning (log) or fail the task (fail)"),  # noqa: E501
    ]
)  # fmt: skip


def config_errors(
    config: Mapping[str, Any], worker_config: Mapping[str, str]
) -> dict[str, list[str]]:
    """The errors of keys taken together, and of the worker's limits (each key alone is
    checked by ``CONFIG_DEF``)."""
    errors: dict[str, list[str]] = {}

    def value(name: str) -> Any:
        try:
            return CONFIG_DEF.parse_key(CONFIG_DEF.keys[name], config)
        except ConfigException:
            return None  # reported by CONFIG_DEF.errors

    url = value("http.api.url")
    if url is not None:
        endpoint = parse_url(url)
        refused = host_error(endpoint.host, endpoint.port, worker_config)
        if refused:
            errors["http.api.url"] = [refused]
    names: set[str] = set()
    separator, headers = value("header.separator"), value("headers")
    if separator and headers:
        try:
            names = {name.lower() for name, _ in parse_headers(headers, separator)}
        except ValueError as exc:
            errors["headers"] = [str(exc)]
    auth = (value("auth.type") or "").lower()
    if auth == "basic":
        user = value("connection.user")
        if not user:
            errors["connection.user"] = ["auth.type=basic needs connection.user"]
        elif ":" in user:
            errors["connection.user"] = ["a Basic user name may not contain ':'"]
    if auth == "bearer" and not value("bearer.token"):
        errors["bearer.token"] = ["auth.type=bearer needs bearer.token"]
    if auth in ("basic", "bearer") and "authorization" in names:
        errors.setdefault("headers", []).append(
            f"an Authorization header conflicts with auth.type={auth}"
        )
    batch = value("batch.max.size")
    if (value("request.body.format") or "").lower() == "string" and batch and batch > 1:
        errors["batch.max.size"] = [
            "request.body.format=string sends one record per request: batch.max.size must be 1"
        ]
    return errors


class HttpSinkConnector(SinkConnector):
    version = "1.0"
    doc = (
        "Sends the records of topics to an HTTP endpoint (webhooks): JSON or text bodies, "
        "batches, basic or bearer auth, HMAC signatures, retries with back-off, at least "
        "once."
    )
    config_def = CONFIG_DEF

    def validate(self, config: Mapping[str, str]) -> dict[str, list[str]]:
        errors = super().validate(config)
        for key, found in config_errors(config, self.worker_config).items():
            errors.setdefault(key, []).extend(found)
        return errors

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        for key, found in sorted(config_errors(config, self.worker_config).items()):
            raise ConfigException(key, "; ".join(found))

    def task_class(self) -> type[SinkTask]:
        return HttpSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """``tasks.max`` tasks sharing the topics' partitions through the group (a
        partition's records stay in order: one task sends them)."""
        return [dict(self.raw) for _ in range(max_tasks)]


# --- the task -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Pending:
    """A record taken by ``put``, its value encoded, waiting to be delivered."""

    topic: str
    partition: int | None
    offset: int | None
    body: bytes
    content_type: str

    @property
    def tp(self) -> TopicPartition | None:
        return None if self.partition is None else TopicPartition(self.topic, self.partition)


class _Unreachable(Exception):
    """No answer: the connection failed (refused, reset, timed out, TLS)."""


class _Stopping(Exception):
    """``stop`` was called while sending."""


def _where(topic: str, partition: int | None, offset: int | None) -> str:
    return f"{topic}-{partition}@{offset}"


def _records(batch: Sequence[_Pending]) -> str:
    first, last = batch[0], batch[-1]
    where = _where(first.topic, first.partition, first.offset)
    if len(batch) == 1:
        return f"record {where}"
    return f"{len(batch)} records {where} .. {_where(last.topic, last.partition, last.offset)}"


class HttpSinkTask(SinkTask):
    config_def = CONFIG_DEF

    def __init__(self) -> None:
        super().__init__()
        self.name = ""
        self._buffer: list[_Pending] = []
        # Per partition, the offset past the last record taken by put (buffered, sent or
        # skipped): the worker puts the same records again after a RetriableException.
        self._taken: dict[TopicPartition, int] = {}
        self._conn: http.client.HTTPConnection | None = None
        self._conn_used = False  # it answered a request: a failure may be a stale keep-alive
        self._sending = False  # the task's thread is in a request or a back-off
        self._broken: str | None = None  # why the task failed (behavior.on.error=fail)
        self._stopping = threading.Event()
        self._secrets: list[str] = []
        self._random = random.Random()  # noqa: S311 - jitter, not cryptography

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, config: Mapping[str, str]) -> None:
        super().start(config)
        for key, found in sorted(config_errors(config, {}).items()):
            raise ConfigException(key, "; ".join(found))
        c = self.config
        self.name = (config.get("name") or "").strip()
        self._endpoint = parse_url(c["http.api.url"])
        self._tls = ssl.create_default_context() if self._endpoint.scheme == "https" else None
        self._method: str = c["request.method"].upper()
        self._string: bool = c["request.body.format"].lower() == "string"
        self._batch: int = 1 if self._string else c["batch.max.size"]
        self._array = self._batch > 1
        self._max_retries: int = c["max.retries"]
        self._backoff: float = c["retry.backoff.ms"] / 1000
        self._backoff_max: float = c["retry.backoff.max.ms"] / 1000
        self._timeout: float = c["request.timeout.ms"] / 1000
        self._retry_codes, self._retry_classes = parse_status_codes(c["retry.on.status.codes"])
        self._on_error: str = c["behavior.on.error"].lower()
        self._on_null: str = c["behavior.on.null.values"].lower()
        secret = c["hmac.secret"]
        self._hmac = secret.encode("utf-8") if secret else None
        self._converter = JsonConverter()
        self._converter.configure(
            {"schemas.enable": False, "decimal.format": c["decimal.format"].upper()},
            is_key=False,
        )
        self._headers, self._content_type = self._static_headers()
        self._stopping.clear()
        self._broken = None
        logger.info(
            "http sink %s: %s %s (auth %s, %s bodies, up to %d record(s) a request%s)",
            self.name,
            self._method,
            self._endpoint.display,
            c["auth.type"].lower(),
            "string" if self._string else "json",
            self._batch,
            ", signed" if self._hmac else "",
        )

    def _static_headers(self) -> tuple[dict[str, str], str | None]:
        """The headers of every request, and the Content-Type ``headers`` sets (if any);
        notes each secret so that no message shows it."""
        c = self.config
        headers = {"User-Agent": USER_AGENT}
        secrets = [c["connection.password"], c["bearer.token"], c["hmac.secret"]]
        auth = c["auth.type"].lower()
        if auth == "basic":
            pair = f"{c['connection.user']}:{c['connection.password'] or ''}"
            credentials = base64.b64encode(pair.encode("utf-8")).decode("ascii")
            headers["Authorization"] = f"Basic {credentials}"
            secrets.append(credentials)
        elif auth == "bearer":
            headers["Authorization"] = f"Bearer {c['bearer.token']}"
        content_type = None
        for name, value in parse_headers(c["headers"] or "", c["header.separator"]):
            if name.lower() == "content-type":
                content_type = value
            else:
                for known in [k for k in headers if k.lower() == name.lower()]:
                    del headers[known]
                headers[name] = value
            secrets.append(value)
        # Longest first, so that a secret holding another is hidden whole; short values
        # ("1", "json") are no secrets and would blank out ordinary words.
        self._secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)
        return headers, content_type

    def open(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._taken.pop(tp, None)

    def close(self, partitions: set[TopicPartition]) -> None:
        """Drop what is buffered for ``partitions`` (the worker tried a last commit; what is
        still here was not committed, so the partitions' next owner reads it again)."""
        self._buffer = [p for p in self._buffer if p.tp not in partitions]
        for tp in partitions:
            self._taken.pop(tp, None)

    def stop(self) -> None:
        """Stop sending: a back-off ends at once, and a request in flight (on another
        thread) is broken off. What is buffered is not sent (nor committed)."""
        self._stopping.set()
        conn = self._conn
        if conn is None:
            return
        if self._sending:  # the task's thread is in a request: wake it, it closes
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        else:
            self._close()

    # --- put, flush, pre_commit ---------------------------------------------------------------

    def put(self, records: Sequence[ConnectRecord]) -> None:
        if self._broken is not None:
            raise ConnectException(self._broken)
        for record in records:
            offset = record.kafka_offset
            if record.partition is not None and offset is not None:
                tp = TopicPartition(record.topic, record.partition)
                if offset < self._taken.get(tp, -1):
                    continue  # taken already: the worker puts a batch again after a retry
                self._taken[tp] = offset + 1
            pending = self._encode(record)
            if pending is not None:
                self._buffer.append(pending)
        self._send(whole=True)

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Send everything buffered; :class:`RetriableException` if the server could not be
        reached (what was not delivered stays buffered)."""
        if self._broken is not None:
            raise ConnectException(self._broken)
        self._send(whole=False)

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Each partition's offset past its delivered records: the offset of its first
        record still buffered, or the worker's offset if none is. Once the task failed
        (the worker commits on its way out) nothing is sent again."""
        if self._broken is None:
            try:
                self.flush(offsets)
            except RetriableException as exc:
                logger.warning("%s: %s; committing only the offsets before it", self.name, exc)
        first: dict[TopicPartition, int | None] = {}
        for pending in self._buffer:
            if pending.tp is not None and pending.tp not in first:
                first[pending.tp] = pending.offset
        safe: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            if tp not in first:
                safe[tp] = offset
            else:
                held = first[tp]
                if held is not None:  # (without an offset, nothing of tp is safe)
                    safe[tp] = min(offset, held)
        return safe

    # --- records to bodies --------------------------------------------------------------------

    def _encode(self, record: ConnectRecord) -> _Pending | None:
        """The record's body, or None if it is skipped (a null value, or one that cannot
        be written and behavior.on.error says skip)."""
        where = _where(record.topic, record.partition, record.kafka_offset)
        value = record.value
        if value is None:
            if self._on_null == "fail":
                raise ConnectException(
                    f"{self.name}: {where}: a null value (tombstone), and "
                    "behavior.on.null.values=fail"
                )
            if self._on_null == "log":
                logger.warning("%s: %s: null value (tombstone) skipped", self.name, where)
            return None
        schema = record.value_schema
        if schema is None and isinstance(value, Struct):
            schema = value.schema
        try:
            if self._string and isinstance(value, str):
                body, content_type = value.encode("utf-8"), TEXT
            elif self._string and isinstance(value, bytes | bytearray | memoryview):
                body, content_type = bytes(value), OCTETS
            else:
                data = self._converter.from_connect(record.topic, schema, value)
                body, content_type = (data if data is not None else b"null"), JSON
        except (DataException, ValueError, TypeError) as exc:
            self._failed(f"{where}: the value cannot be written as JSON: {exc}")
            return None
        return _Pending(
            record.topic, record.partition, record.kafka_offset, body,
            self._content_type or content_type,
        )  # fmt: skip

    # --- sending ------------------------------------------------------------------------------

    def _send(self, whole: bool) -> None:
        """Deliver the buffer in order, request by request; ``whole``: only full requests
        (a partial one waits for more records)."""
        while self._buffer and (not whole or len(self._buffer) >= self._batch):
            batch = self._buffer[: self._batch]
            self._sending = True
            try:
                self._deliver(batch)
            except _Stopping:
                self._close()
                raise RetriableException(
                    f"stopping: {len(self._buffer)} record(s) not delivered"
                ) from None
            finally:
                self._sending = False
            del self._buffer[: len(batch)]

    def _deliver(self, batch: Sequence[_Pending]) -> None:
        """Send one request until it is answered 2xx, or fails and behavior.on.error lets it
        go; :class:`RetriableException` if the server could not be reached after the
        retries, :class:`ConnectException` if it failed and behavior.on.error=fail."""
        if self._array:
            body = b"[" + b",".join(p.body for p in batch) + b"]"
        else:
            body = batch[0].body
        headers = self._request_headers(batch)
        attempt = 0
        while True:
            if self._stopping.is_set():
                raise _Stopping
            if self._hmac is not None:
                headers[SIGNATURE_HEADER] = signature(self._hmac, int(time.time()), body)
            wait: float | None = None
            answered = False
            try:
                status, reason, answer, excerpt = self._request(headers, body)
            except _Unreachable as exc:
                failure = f"{self._method} {self._endpoint.display} failed: {exc}"
            else:
                answered = True
                if 200 <= status < 300:
                    return
                failure = f"{self._method} {self._endpoint.display} answered {status} {reason}"
                if excerpt:
                    failure += f": {excerpt}"
                if status not in self._retry_codes and status // 100 not in self._retry_classes:
                    self._failed(f"{failure} ({_records(batch)})")
                    return
                if status in (429, 503):
                    wait = retry_after(answer.get("Retry-After"), time.time())
            if attempt >= self._max_retries:
                tried = f"after {attempt + 1} attempt(s)"
                if not answered:
                    raise RetriableException(f"{failure} ({_records(batch)}, {tried})")
                self._failed(f"{failure} ({_records(batch)}, {tried})")
                return
            delay = self._delay(attempt, wait)
            attempt += 1
            logger.warning(
                "%s: %s (%s); retry %d of %d in %.2f s",
                self.name, failure, _records(batch), attempt, self._max_retries, delay,
            )  # fmt: skip
            if self._stopping.wait(delay):
                raise _Stopping

    def _request_headers(self, batch: Sequence[_Pending]) -> dict[str, str]:
        first = batch[0]
        headers = dict(self._headers)
        headers["Content-Type"] = first.content_type
        headers[TOPIC_HEADER] = first.topic
        if first.partition is not None:
            headers[PARTITION_HEADER] = str(first.partition)
        if first.offset is not None:
            headers[OFFSET_HEADER] = str(first.offset)
        if all(p.partition is not None and p.offset is not None for p in batch):
            # The same records in one request: the same id, whenever they are sent.
            names = "\n".join(f"{p.topic}\0{p.partition}\0{p.offset}" for p in batch)
            delivery = uuid.uuid5(_DELIVERY_NAMESPACE, f"{self.name}\n{names}")
        else:
            delivery = uuid.uuid4()
        headers[DELIVERY_HEADER] = str(delivery)
        return headers

    def _delay(self, attempt: int, wait: float | None) -> float:
        """Seconds before retry ``attempt + 1``: a Retry-After's ``wait`` (capped), else
        the back-off doubled ``attempt`` times (capped), between half and all of it."""
        if wait is not None:
            return min(wait, self._backoff_max)
        full = min(self._backoff * 2.0 ** min(attempt, 62), self._backoff_max)
        return full / 2 + self._random.uniform(0, full / 2)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            e = self._endpoint
            if self._tls is not None:
                self._conn = http.client.HTTPSConnection(
                    e.host, e.port, timeout=self._timeout, context=self._tls
                )
            else:
                self._conn = http.client.HTTPConnection(e.host, e.port, timeout=self._timeout)
            self._conn_used = False
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _request(
        self, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, http.client.HTTPMessage, str]:
        """One request and its answer: (status, reason, headers, an excerpt of the body);
        :class:`_Unreachable` if there was none. A kept-alive connection the server closed
        meanwhile is reopened and the request sent again at once (not a retry)."""
        while True:
            conn = self._connection()
            reused = self._conn_used
            try:
                conn.request(self._method, self._endpoint.target, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read(_RESPONSE_READ_MAX)
                if not response.isclosed():  # a long answer: not worth draining
                    self._close()
                self._conn_used = self._conn is not None
                return response.status, response.reason, response.headers, self._excerpt(data)
            except (
                http.client.RemoteDisconnected,
                ConnectionResetError,
                BrokenPipeError,
            ) as exc:
                self._close()
                if self._stopping.is_set():
                    raise _Stopping from None
                if not reused:
                    raise _Unreachable(self._hide(f"{type(exc).__name__}: {exc}")) from None
            except (OSError, http.client.HTTPException) as exc:
                self._close()
                if self._stopping.is_set():
                    raise _Stopping from None
                raise _Unreachable(self._hide(f"{type(exc).__name__}: {exc}")) from None

    def _excerpt(self, data: bytes) -> str:
        text = " ".join(data.decode("utf-8", errors="replace").split())
        if len(text) > _EXCERPT_CHARS:
            text = text[:_EXCERPT_CHARS] + "…"
        return self._hide(text)

    def _hide(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[hidden]")
        return text

    def _failed(self, message: str) -> None:
        """A request or record failed for good: behavior.on.error."""
        message = self._hide(message)
        if self._on_error == "fail":
            self._broken = f"{self.name}: {message}"
            raise ConnectException(self._broken)
        if self._on_error == "log":
            logger.warning("%s: %s; skipped (behavior.on.error=log)", self.name, message)
        else:
            logger.debug("%s: %s; skipped (behavior.on.error=ignore)", self.name, message)
