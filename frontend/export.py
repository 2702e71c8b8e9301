"""Export of the message browser's rows as JSON lines or CSV
(``/t/<tenant>/topics/<name>/messages/export/``).

The export runs the browser's own query (the same GET parameters, the same bounded scan,
as the member, behind the same ``member_view`` and ``topic_or_404`` checks) and streams
its rows: ``rows=shown`` the rows the page shows (``limit`` of them), ``rows=matched``
every match the scan finds (at most ``scan`` records are read, as always). Keys and values
are rendered in the browser's chosen format, in full, with JSON on one line; a null is
JSON ``null`` (CSV: empty, its format ``null``). With ``transactions=show`` the
``transaction`` column marks aborted records, markers and records past the last stable
offset (empty for a record a read_committed consumer reads).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse

from control_plane.core.errors import ServiceError, Unavailable
from data_plane.client import KafkaClientError
from frontend.browse import as_text, key_format, parse_query, run_scan
from frontend.console import Page, member_view
from frontend.scan import Query, Row
from frontend.topics import topic_or_404

KINDS = {"jsonl": ("application/x-ndjson", "jsonl"), "csv": ("text/csv", "csv")}
COLUMNS = [
    "partition",
    "offset",
    "timestamp",
    "time",
    "timestamp_type",
    "key",
    "key_format",
    "value",
    "value_format",
    "headers",
    "transaction",
]


def _text(data: bytes | None, fmt: str) -> tuple[str | None, str]:
    if data is None:
        return None, "null"
    return as_text(data, fmt, pretty=False)


def fields(q: Query, row: Row) -> dict[str, Any]:
    """One exported row (the CSV's columns in order)."""
    rec, stamp = row.record, row.timestamp
    key, key_kind = _text(rec.key, key_format(q))
    value, value_kind = _text(rec.value, q.fmt)
    return {
        "partition": row.partition,
        "offset": rec.offset,
        "timestamp": stamp,
        "time": datetime.fromtimestamp(stamp / 1000, tz=UTC).isoformat() if stamp >= 0 else None,
        "timestamp_type": "log_append_time" if row.log_append_time else "create_time",
        "key": key,
        "key_format": key_kind,
        "value": value,
        "value_format": value_kind,
        "headers": [{"key": h.key, "value": _text(h.value, "auto")[0]} for h in rec.headers],
        "transaction": row.state,
    }


class _Line:
    """csv.writer's file: hands back each written line."""

    def write(self, line: str) -> str:
        return line


def _jsonl(q: Query, rows: list[Row]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(fields(q, row), ensure_ascii=False) + "\n"


def _csv(q: Query, rows: list[Row]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(COLUMNS)
    for row in rows:
        out = fields(q, row)
        out["headers"] = json.dumps(out["headers"], ensure_ascii=False)
        yield writer.writerow(["" if out[c] is None else out[c] for c in COLUMNS])


@member_view("topics")
def topic_messages_export(page: Page, name: str) -> HttpResponse | StreamingHttpResponse:
    topic = topic_or_404(page, name)
    params = page.request.GET
    kind = params.get("as", "jsonl")
    which = params.get("rows", "shown")
    if kind not in KINDS or which not in ("shown", "matched"):
        return HttpResponse(
            "as is jsonl or csv; rows is shown or matched\n", status=400, content_type="text/plain"
        )
    try:
        query = parse_query(params, topic.partition_count)
        if which == "matched":
            query.limit = query.scan  # every match within the scan's bound
        result = run_scan(page, topic, query)
    except ServiceError as exc:
        return HttpResponse(f"{exc.message}\n", status=exc.status, content_type="text/plain")
    except (KafkaClientError, Unavailable) as exc:
        return HttpResponse(
            f"reading {topic.name} failed: {exc}\n", status=503, content_type="text/plain"
        )
    content_type, ext = KINDS[kind]
    body = _jsonl(query, result.rows) if kind == "jsonl" else _csv(query, result.rows)
    response = StreamingHttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{topic.name}-messages.{ext}"'
    response["X-Millrace-Scanned"] = str(result.scanned)
    return response
