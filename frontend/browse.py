"""The message browser and test produce of a topic (``/t/<tenant>/topics/<name>/messages/``).

Reads act as the signed-in member through the console principal
(``internal_auth.console_username``): the broker checks the member's role, so the
browser can never read or write more than the member may.

A browse is a **bounded scan** (:mod:`frontend.scan`): it reads at most ``scan`` records
(and for at most ``SCAN_SECONDS``) however few match the filters, and says how many it
read, where it stopped and how to go on. On a busy topic a filter that matches nothing
costs one bounded scan, never a read of the whole log.

Keys and values are shown as pretty JSON when they parse, as text when they are UTF-8,
and as hex or base64 otherwise (or when asked).

Transactions: the browser shows what a read_committed consumer reads unless
``transactions=show`` is asked; then aborted transactions' records, commit and abort
markers, and records past the last stable offset are shown too, each marked.
"""

from __future__ import annotations

import base64
import json
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
from control_plane.streams import codec, services
from control_plane.streams.kafka import Delegation, error_info, kafka_error, readers
from control_plane.tenancy.models import Role
from data_plane.client import KafkaClientError
from frontend.console import Page, form_errors, member_view
from frontend.scan import DEFAULT_LIMIT, DEFAULT_SCAN, MAX_LIMIT, MAX_SCAN, Query, Row, Scan, scan
from frontend.topics import topic_or_404
from frontend.units import epoch_ms, whole_number

POSITIONS = ("newest", "earliest", "offset", "timestamp")
FORMATS = ("auto", "json", "text", "hex", "base64")
TRANSACTIONS = ("hide", "show")  # aborted records, markers and the log past the LSO
# How a row's transactional state reads in the page (scan.Row.state).
STATES = {
    "aborted": ("aborted", "A record of an aborted transaction: consumers never see it."),
    "unstable": (
        "past the LSO",
        "After the last stable offset: read_committed consumers see it only once the "
        "transactions open before it have ended.",
    ),
    "commit": ("commit marker", "The end of a committed transaction (a control record)."),
    "abort": ("abort marker", "The end of an aborted transaction (a control record)."),
}
PREVIEW_CHARS = 4_000
LINE_CHARS = 120  # the compact row's preview


def who(page: Page) -> Delegation:
    return Delegation.console(page.tenant.slug, page.request.user.pk)


# --- the query ---------------------------------------------------------------------------


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
    shown = params.get("transactions", "hide").strip() or "hide"
    if shown not in TRANSACTIONS:
        raise InvalidInput(f"must be one of {', '.join(TRANSACTIONS)}", field="transactions")
    q.transactions = shown == "show"
    for part in filter(None, params.get("resume", "").split(",")):
        index, sep, offset = part.partition(":")
        if not sep or not index.isdigit() or not offset.lstrip("-").isdigit():
            raise InvalidInput("resume is partition:offset pairs", field="resume")
        q.resume[int(index)] = int(offset)
    return q


# --- showing bytes -------------------------------------------------------------------------


def as_text(data: bytes, fmt: str, *, pretty: bool = True) -> tuple[str, str]:
    """(text, kind) of non-null bytes in ``fmt``: JSON (indented when ``pretty``, else on
    one line) when it parses (``auto``: objects and arrays only), else UTF-8 text, else hex
    or base64 (``base64`` only when asked)."""
    if fmt in ("auto", "json"):
        try:
            parsed = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            parsed = None
        else:
            if fmt == "json" or isinstance(parsed, dict | list):
                if pretty:
                    return json.dumps(parsed, indent=2, ensure_ascii=False), "json"
                return json.dumps(parsed, ensure_ascii=False, separators=(",", ":")), "json"
    if fmt in ("auto", "json", "text"):
        try:
            return data.decode("utf-8"), "text"
        except UnicodeDecodeError:
            pass
    if fmt == "base64":
        return base64.b64encode(data).decode("ascii"), "base64"
    return data.hex(" "), "hex"


def show(data: bytes | None, fmt: str) -> dict[str, Any]:
    """How to show a key, value or header value: {"text", "line", "kind", "size", "cut"}:
    ``text`` in full (up to PREVIEW_CHARS), ``line`` a one-line preview of it."""
    if data is None:
        return {"text": "null", "line": "null", "kind": "null", "size": 0, "cut": False}
    text, kind = as_text(data, fmt)
    line = text if kind != "json" else as_text(data, fmt, pretty=False)[0]
    line = " ".join(line[: LINE_CHARS * 2].split())
    if len(line) > LINE_CHARS:
        line = line[: LINE_CHARS - 1] + "…"
    cut = len(text) > PREVIEW_CHARS
    return {"text": text[:PREVIEW_CHARS], "line": line, "kind": kind, "size": len(data), "cut": cut}


def key_format(q: Query) -> str:
    return "auto" if q.fmt == "json" else q.fmt


def render(q: Query, row: Row) -> dict[str, Any]:
    """A matching record as the page shows it."""
    rec, stamp = row.record, row.timestamp
    return {
        "partition": row.partition,
        "offset": rec.offset,
        "timestamp": stamp,
        "time": datetime.fromtimestamp(stamp / 1000, tz=UTC) if stamp >= 0 else None,
        "timestamp_type": "log append" if row.log_append_time else "create",
        "key": show(rec.key, key_format(q)),
        "value": show(rec.value, q.fmt),
        "headers": [(h.key, show(h.value, "auto")) for h in rec.headers],
        "state": row.state,
        "state_label": STATES[row.state][0] if row.state else "",
        "state_help": STATES[row.state][1] if row.state else "",
        "marker": row.state in ("commit", "abort"),
        "producer_id": row.producer_id,
    }


def explain(topic: str) -> Any:
    return lambda code, partition: kafka_error(code, topic=topic, partition=partition).message


# --- pages ----------------------------------------------------------------------------------


def run_scan(page: Page, topic: Topic, query: Query) -> Scan:
    """The scan ``query`` asks for, read as the member. Raises KafkaClientError,
    Unavailable (no broker address known) and ServiceError."""
    everything = list(range(topic.partition_count))
    chosen = [query.partition] if query.partition is not None else everything
    with readers.client(who(page), timeout=10.0) as client:
        return scan(client, topic.name, query, chosen, explain=explain(topic.name))


@member_view("topics")
def topic_messages(page: Page, name: str) -> HttpResponse:
    return _messages_page(page, topic_or_404(page, name))


# Per-record produce errors that are about the value the member typed.
VALUE_ERRORS = {"message_too_large", "invalid_record", "record_list_too_large"}


def _messages_page(
    page: Page,
    topic: Topic,
    *,
    produce: dict[str, str] | None = None,
    produce_errors: dict[str, str] | None = None,
) -> HttpResponse:
    """The browser (the query in the URL) and the produce form (``produce``: what a
    refused produce had in it, shown again with ``produce_errors`` beside the fields)."""
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
        "transactions": params.get("transactions", "hide"),
    }
    errors: dict[str, str] = {}
    result: Scan | None = None
    query: Query | None = None
    try:
        query = parse_query(params, topic.partition_count)
        result = run_scan(page, topic, query)
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
    exports = {}
    if result is not None:
        base = reverse("frontend:topic-messages-export", args=[page.tenant.slug, topic.name])
        for rows in ("shown", "matched"):
            for kind in ("jsonl", "csv"):
                export = page.request.GET.copy()
                export["as"], export["rows"] = kind, rows
                exports[f"{rows}_{kind}"] = f"{base}?{export.urlencode()}"
    return page.render(
        "frontend/topic_messages.html",
        {
            "topic": topic,
            "form": form,
            "errors": errors,
            "scan": result,
            "rows": [render(query, row) for row in result.rows] if result and query else [],
            "query": query,
            "more_url": more_url,
            "exports": exports,
            "partition_choices": range(topic.partition_count),
            "positions": POSITIONS,
            "formats": FORMATS,
            "max_scan": MAX_SCAN,
            "max_limit": MAX_LIMIT,
            "produce": produce or {},
            "produce_errors": produce_errors or {},
        },
        partial="frontend/partials/message_rows.html",
        status=400 if produce_errors or (errors and "form" not in errors) else 200,
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
        [result] = services.produce(who(page), topic.name, [record], "all", timeout=30.0)
    except ServiceError as exc:
        problem = form_errors(exc)
    except Exception as exc:  # noqa: BLE001 - a Kafka client failure, told to the member
        problem = {"form": error_info(exc)["message"]}
    else:
        if "error" not in result:
            messages.success(
                page.request,
                f"Produced to partition {result['partition']} at offset {result['offset']}.",
            )
            query = urlencode(
                {"partition": result["partition"], "from": "offset", "offset": result["offset"]}
            )
            return redirect(f"{_messages_url(page, topic)}?{query}")
        error = result["error"]
        problem = {"value" if error.get("code") in VALUE_ERRORS else "form": error["message"]}
    # Refused: the page again, with what was typed and the reason beside its field.
    return _messages_page(page, topic, produce=form, produce_errors=problem)


def _messages_url(page: Page, topic: Topic) -> str:
    return reverse("frontend:topic-messages", args=[page.tenant.slug, topic.name])
