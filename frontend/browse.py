"""The message browser and test produce of a topic (``/t/<tenant>/topics/<name>/messages/``).

Reads act as the signed-in member through the console principal
(``internal_auth.console_username``): the broker checks the member's role, so the
browser can never read or write more than the member may.

A browse is a **bounded scan**: it reads at most ``scan`` records (and for at most
``SCAN_SECONDS``) however few match the filters, and says how many it read, where it
stopped and how to go on. On a busy topic a filter that matches nothing costs one
bounded scan, never a read of the whole log.

* ``newest`` reads backwards from the end of each partition, a window at a time;
* ``earliest``, ``offset`` and ``timestamp`` read forwards from that position.

Keys and values are shown as pretty JSON when they parse, as text when they are UTF-8,
and as hex or base64 otherwise (or when asked).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from control_plane.catalog.models import Topic
from control_plane.core.errors import InvalidInput, ServiceError, Unavailable
from control_plane.streams import codec
from control_plane.streams.kafka import (
    Delegation,
    bootstrap_servers,
    error_info,
    gateway,
    kafka_error,
    readers,
)
from control_plane.streams.views import produce_records
from control_plane.tenancy.models import Role
from data_plane.client import EARLIEST, LATEST, ClusterClient, KafkaClientError
from data_plane.records.batch import TimestampType
from frontend.console import Page, form_errors, member_view
from frontend.topics import topic_or_404
from frontend.units import epoch_ms, whole_number

POSITIONS = ("newest", "earliest", "offset", "timestamp")
FORMATS = ("auto", "json", "text", "hex", "base64")
DEFAULT_LIMIT, MAX_LIMIT = 50, 500
DEFAULT_SCAN, MAX_SCAN = 10_000, 200_000
SCAN_SECONDS = 5.0
WINDOW = 500  # records per read
READ_BYTES = 1 << 20
PREVIEW_CHARS = 4_000


def who(page: Page) -> Delegation:
    return Delegation.console(page.tenant.slug, page.request.user.pk)


# --- the query ---------------------------------------------------------------------------


@dataclass
class Query:
    partition: int | None = None  # None: every partition
    position: str = "newest"
    offset: int = 0
    timestamp_ms: int | None = None
    key: str = ""
    text: str = ""
    limit: int = DEFAULT_LIMIT
    scan: int = DEFAULT_SCAN
    fmt: str = "auto"
    # Where a previous scan stopped, per partition (to go on from there).
    resume: dict[int, int] = field(default_factory=dict)

    @property
    def filtered(self) -> bool:
        return bool(self.key or self.text)


def parse_query(params: Any, partitions: int) -> Query:
    """A :class:`Query` from GET parameters; InvalidInput names the field."""
    q = Query()
    raw_partition = params.get("partition", "all").strip() or "all"
    if raw_partition != "all":
        q.partition = whole_number(raw_partition, "partition", 0, partitions - 1)
    q.position = params.get("from", "newest").strip() or "newest"
    if q.position not in POSITIONS:
        raise InvalidInput(f"must be one of {', '.join(POSITIONS)}", field="from")
    if q.position == "offset":
        q.offset = whole_number(params.get("offset", ""), "offset", 0)
    if q.position == "timestamp":
        q.timestamp_ms = epoch_ms(params.get("timestamp", ""), "timestamp")
    q.key = params.get("key", "")
    q.text = params.get("text", "")
    q.limit = whole_number(params.get("limit", str(DEFAULT_LIMIT)), "limit", 1, MAX_LIMIT)
    q.scan = whole_number(params.get("scan", str(DEFAULT_SCAN)), "scan", 1, MAX_SCAN)
    q.fmt = params.get("format", "auto")
    if q.fmt not in FORMATS:
        raise InvalidInput(f"must be one of {', '.join(FORMATS)}", field="format")
    for part in filter(None, params.get("resume", "").split(",")):
        index, sep, offset = part.partition(":")
        if not sep or not index.isdigit() or not offset.lstrip("-").isdigit():
            raise InvalidInput("resume is partition:offset pairs", field="resume")
        q.resume[int(index)] = int(offset)
    return q


# --- showing bytes -------------------------------------------------------------------------


def show(data: bytes | None, fmt: str) -> dict[str, Any]:
    """How to show a key, value or header value: {"text", "kind", "size"}."""
    if data is None:
        return {"text": "null", "kind": "null", "size": 0}
    size = len(data)
    if fmt in ("auto", "json"):
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            parsed = None
        else:
            if fmt == "json" or isinstance(parsed, dict | list):
                return _cut(json.dumps(parsed, indent=2, ensure_ascii=False), "json", size)
    if fmt in ("auto", "json", "text"):
        try:
            return _cut(data.decode("utf-8"), "text", size)
        except UnicodeDecodeError:
            pass
    if fmt == "base64":
        return _cut(base64.b64encode(data).decode("ascii"), "base64", size)
    return _cut(data.hex(" "), "hex", size)


def _cut(text: str, kind: str, size: int) -> dict[str, Any]:
    cut = len(text) > PREVIEW_CHARS
    return {"text": text[:PREVIEW_CHARS], "kind": kind, "size": size, "cut": cut}


def _matches(q: Query, key: bytes | None, value: bytes | None, headers: list[Any]) -> bool:
    if q.key and q.key.encode() not in (key or b""):
        return False
    if q.text:
        needle = q.text.encode()
        if needle in (value or b""):
            return True
        return any(needle in h.key.encode() or needle in (h.value or b"") for h in headers)
    return True


# --- scanning -------------------------------------------------------------------------------


@dataclass
class PartitionScan:
    partition: int
    start: int  # the log start offset
    end: int  # the high watermark
    scanned: int = 0
    next: int | None = None  # where to go on (None: nothing left in that direction)
    error: str | None = None


@dataclass
class Scan:
    records: list[dict[str, Any]]
    partitions: list[PartitionScan]
    scanned: int
    limited_by: str | None  # "matches", "scan", "time" or None (read everything asked)

    @property
    def resume(self) -> str:
        return ",".join(f"{p.partition}:{p.next}" for p in self.partitions if p.next is not None)


def _record(q: Query, partition: int, rec: Any, ts_type: TimestampType, batch_ts: int) -> Any:
    stamp = batch_ts if ts_type is TimestampType.LOG_APPEND_TIME else rec.timestamp
    return {
        "partition": partition,
        "offset": rec.offset,
        "timestamp": stamp,
        "time": datetime.fromtimestamp(stamp / 1000, tz=UTC) if stamp >= 0 else None,
        "timestamp_type": "log append" if ts_type is TimestampType.LOG_APPEND_TIME else "create",
        "key": show(rec.key, "auto" if q.fmt == "json" else q.fmt),
        "value": show(rec.value, q.fmt),
        "headers": [(h.key, show(h.value, "auto")) for h in rec.headers],
    }


def _starts(
    client: ClusterClient, topic: str, q: Query, partitions: list[int]
) -> dict[int, PartitionScan]:
    tps = [(topic, p) for p in partitions]
    first = client.list_offsets(dict.fromkeys(tps, EARLIEST))
    last = client.list_offsets(dict.fromkeys(tps, LATEST))
    found: dict[tuple[str, int], Any] = {}
    if q.position == "timestamp" and not q.resume:
        assert q.timestamp_ms is not None
        found = client.list_offsets(dict.fromkeys(tps, q.timestamp_ms))
    out = {}
    for tp in tps:
        error = first[tp].error or last[tp].error or (found[tp].error if found else 0)
        p = PartitionScan(tp[1], first[tp].offset, last[tp].offset)
        if error:
            p.error = kafka_error(error, topic=topic, partition=tp[1]).message
        elif tp[1] in q.resume:
            p.next = q.resume[tp[1]]
        elif q.resume:
            p.next = None  # this partition had nothing left when the scan stopped
        elif q.position == "newest":
            p.next = p.end
        elif q.position == "earliest":
            p.next = p.start
        elif q.position == "offset":
            p.next = min(max(q.offset, p.start), p.end)
        else:
            p.next = found[tp].offset if found[tp].offset >= 0 else p.end
        out[tp[1]] = p
    return out


def scan(client: ClusterClient, topic: str, q: Query, partitions: list[int]) -> Scan:
    """Read at most ``q.scan`` records of ``partitions`` and keep up to ``q.limit`` matches."""
    deadline = time.monotonic() + SCAN_SECONDS
    states = _starts(client, topic, q, partitions)
    backwards = q.position == "newest"
    live = [p for p in states.values() if p.error is None and p.next is not None]
    budget = q.scan
    matched: list[dict[str, Any]] = []
    limited_by = None
    # Round robin over partitions, one window each, so no partition hides the others.
    while live:
        if budget <= 0:
            limited_by = "scan"
            break
        if time.monotonic() > deadline:
            limited_by = "time"
            break
        if len(matched) >= q.limit and not backwards:
            limited_by = "matches"
            break
        share = min(WINDOW, -(-budget // len(live)))  # the budget shared out fairly
        for p in list(live):
            assert p.next is not None
            window = min(share, budget)
            if window <= 0:
                break
            if backwards:
                lo = max(p.start, p.next - window)
                if lo >= p.next:
                    p.next = None
                    live.remove(p)
                    continue
                got = _read_range(client, topic, p, lo, p.next)
                p.next = lo if lo > p.start else None
            else:
                if p.next >= p.end:
                    p.next = None
                    live.remove(p)
                    continue
                got = _read(client, topic, p, p.next, min(window, p.end - p.next))
                p.next = got[-1][0].offset + 1 if got else None
            if p.error or p.next is None:
                live.remove(p)
            p.scanned += len(got)
            budget -= len(got)
            matched += [
                _record(q, p.partition, *r)
                for r in got
                if _matches(q, r[0].key, r[0].value, r[0].headers)
            ]
        if backwards and len(matched) >= q.limit:
            # Every live partition has read its window; the newest matches are in hand.
            limited_by = "matches"
            break
    if backwards:
        matched.sort(key=lambda r: (r["timestamp"], r["offset"]), reverse=True)
    else:
        matched.sort(key=lambda r: (r["timestamp"], r["partition"], r["offset"]))
    if len(matched) > q.limit:
        matched = matched[: q.limit]
        limited_by = "matches"
    ordered = sorted(states.values(), key=lambda p: p.partition)
    return Scan(matched, ordered, sum(p.scanned for p in ordered), limited_by)


def _read(client: ClusterClient, topic: str, p: PartitionScan, offset: int, count: int) -> Any:
    answer = client.read((topic, p.partition), offset, max_records=count, max_bytes=READ_BYTES)
    if answer.error:
        p.error = kafka_error(answer.error, topic=topic, partition=p.partition).message
        return []
    return answer.records


def _read_range(client: ClusterClient, topic: str, p: PartitionScan, lo: int, hi: int) -> Any:
    """Every record in [lo, hi): several reads when a read's byte limit cuts it short."""
    out: list[Any] = []
    offset = lo
    while offset < hi:
        got = [r for r in _read(client, topic, p, offset, hi - offset) if r[0].offset < hi]
        if not got:
            break
        out += got
        offset = got[-1][0].offset + 1
    return out


# --- pages ----------------------------------------------------------------------------------


@member_view("topics")
def topic_messages(page: Page, name: str) -> HttpResponse:
    topic = topic_or_404(page, name)
    params = page.request.GET
    form = {
        "partition": params.get("partition", "all"),
        "from": params.get("from", "newest"),
        "offset": params.get("offset", ""),
        "timestamp": params.get("timestamp", ""),
        "key": params.get("key", ""),
        "text": params.get("text", ""),
        "limit": params.get("limit", str(DEFAULT_LIMIT)),
        "scan": params.get("scan", str(DEFAULT_SCAN)),
        "format": params.get("format", "auto"),
    }
    errors: dict[str, str] = {}
    result: Scan | None = None
    query: Query | None = None
    try:
        query = parse_query(params, topic.partition_count)
        chosen = (
            [query.partition] if query.partition is not None else list(range(topic.partition_count))
        )
        with readers.client(who(page), timeout=10.0) as client:
            result = scan(client, topic.name, query, chosen)
    except ServiceError as exc:
        errors = form_errors(exc)
    except KafkaClientError as exc:
        errors = {"form": f"reading {topic.name} failed: {exc}"}
    except Unavailable as exc:
        errors = {"form": exc.message}
    more_url = None
    if result is not None and result.limited_by and result.resume:
        more = page.request.GET.copy()
        more["resume"] = result.resume
        more_url = f"{_messages_url(page, topic)}?{more.urlencode()}"
    return page.render(
        "frontend/topic_messages.html",
        {
            "topic": topic,
            "form": form,
            "errors": errors,
            "scan": result,
            "query": query,
            "more_url": more_url,
            "partition_choices": range(topic.partition_count),
            "positions": POSITIONS,
            "formats": FORMATS,
            "max_scan": MAX_SCAN,
            "max_limit": MAX_LIMIT,
        },
        partial="frontend/partials/message_rows.html",
        status=400 if errors and "form" not in errors else 200,
    )


def _headers(raw: str) -> list[tuple[str, bytes]]:
    """``name: value`` lines as record headers."""
    out = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise InvalidInput(f"line {number}: write headers as name: value", field="headers")
        out.append((name.strip(), value.strip().encode()))
    return out


@require_POST
@member_view("topics", role=Role.DEVELOPER)
def topic_produce(page: Page, name: str) -> HttpResponse:
    """Produce one record (acks=all) as the member, then show it in the browser."""
    topic = topic_or_404(page, name)
    post = page.request.POST
    form = {k: post.get(k, "") for k in ("key", "value", "headers", "partition")}
    try:
        partition = None
        if form["partition"].strip():
            partition = whole_number(form["partition"], "partition", 0, topic.partition_count - 1)
        record = codec.OutRecord(
            key=form["key"].encode() if form["key"] else None,
            value=form["value"].encode() if form["value"] else None,
            headers=_headers(form["headers"]),
            partition=partition,
            timestamp_ms=None,
        )
        if record.size > settings.MILLRACE_REST_MAX_BODY_BYTES:
            raise InvalidInput("the record is too large for a test record", field="value")
        delegation = who(page)
        bootstrap = bootstrap_servers()
        [result] = gateway.run(
            lambda: produce_records(delegation, bootstrap, topic.name, [record], "all"), 30.0
        )
    except ServiceError as exc:
        messages.error(page.request, f"Not produced: {exc.message}")
    except Exception as exc:  # noqa: BLE001 - a Kafka client failure, told to the member
        messages.error(page.request, f"Not produced: {error_info(exc)['message']}")
    else:
        if "error" in result:
            messages.error(page.request, f"Not produced: {result['error']['message']}")
        else:
            messages.success(
                page.request,
                f"Produced to partition {result['partition']} at offset {result['offset']}.",
            )
            query = urlencode(
                {"partition": result["partition"], "from": "offset", "offset": result["offset"]}
            )
            return redirect(f"{_messages_url(page, topic)}?{query}")
    return redirect(_messages_url(page, topic))


def _messages_url(page: Page, topic: Topic) -> str:
    return reverse("frontend:topic-messages", args=[page.tenant.slug, topic.name])
