"""Log output for every process (web, broker, worker, beat): JSON lines or plain text.

``settings.LOGGING`` is :func:`logging_config`: one handler on the root logger whose
formatter is structlog's stdlib ``ProcessorFormatter``, so every ``logging.getLogger(...)``
record (Django's, daphne's, Celery's, the broker's ``millrace.*``) and every
``structlog.get_logger()`` event comes out the same way:

* ``json`` (``MILLRACE_LOG_FORMAT``; the production default): one JSON object per line
  with ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``exception``
  (the traceback) when there is one, the record's ``extra`` fields and the context bound
  with ``structlog.contextvars`` (``request_id``, ``tenant``, ``user_id``, ``task_id``...);
* ``plain`` (the development default): ``<asctime> <LEVEL> <logger> <message>`` as before,
  followed by the same context as ``key=value`` (not ``extra`` fields) and the traceback
  on the next lines.

Secrets are redacted on the way out (:func:`redact_secrets`): the values of keys named
like a password, secret, token, authorization, cookie or session id, at any depth of the
event, and such ``key=value`` / ``'key': 'value'`` pairs, Bearer/Basic credentials and
URL passwords in the message text. It is a safety net, not a licence to log secrets.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

LOG_FORMATS = ("json", "plain")
REDACTED = "[redacted]"

# Key names whose values never reach a log line (matched anywhere in the name).
SECRET_KEY_NAME = re.compile(
    r"passw(?:or)?d|secret|token|authori[sz]ation|cookie|session_?id|credential", re.IGNORECASE
)
# ``password=x``, ``"token": "x"``, ``'api_secret': 'x'`` inside a message: the match
# starts at the secret word (so scanning is linear) and covers the rest of the key name.
_PAIR_IN_TEXT = re.compile(
    rf"""(?P<key>(?:{SECRET_KEY_NAME.pattern})[A-Za-z0-9_.-]{{0,40}}?)
         (?P<sep>["']?\s*[:=]\s*)
         (?P<value>'[^']*'|"[^"]*"|[^\s,;&)}}\]]+)""",
    re.IGNORECASE | re.VERBOSE,
)
_CREDENTIALS_IN_TEXT = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{16,}", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]{0,30}://[^/\s:@]*):[^/\s@]+@", re.IGNORECASE)

# LogRecord attributes that are not ``extra`` fields.
_RECORD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()
    | {"message", "asctime", "color_message"}
)
# ``extra`` fields never copied into the event: Django's ``django.request`` records carry
# the request (its repr has the query string), Channels' the ASGI scope (headers).
_EXTRA_DENIED = frozenset({"request", "scope", "headers", "environ"})


def scrub_text(text: str) -> str:
    """``text`` with credentials that look like credentials replaced by ``[redacted]``."""
    if not text:
        return text
    text = _CREDENTIALS_IN_TEXT.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)

    def pair(m: re.Match[str]) -> str:
        value = m.group("value")
        quote = value[0] if value[:1] in {"'", '"'} else ""
        return f"{m.group('key')}{m.group('sep')}{quote}{REDACTED}{quote}"

    return _PAIR_IN_TEXT.sub(pair, text)


def _redact(value: Any, depth: int = 0) -> Any:
    if depth > 10:
        return value
    if isinstance(value, Mapping):
        return {
            k: (
                REDACTED
                if isinstance(k, str) and SECRET_KEY_NAME.search(k)
                else _redact(v, depth + 1)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_redact(v, depth + 1) for v in value]
    if isinstance(value, str):
        return scrub_text(value)
    return value


def redact_secrets(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: redact secret-named keys (any depth) and credentials in text."""
    for key, value in list(event_dict.items()):
        if key.startswith("_") or key == "exc_info":
            continue
        if SECRET_KEY_NAME.search(key):
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _redact(value)
    return event_dict


def add_timestamp(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """``timestamp``: the record's creation time as ISO 8601 UTC with milliseconds."""
    record = event_dict.get("_record")
    created = record.created if record is not None else time.time()
    event_dict["timestamp"] = (
        datetime.fromtimestamp(created, tz=UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    )
    return event_dict


def add_extra(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """A stdlib record's ``extra={...}`` fields, except request/scope objects."""
    record = event_dict.get("_record")
    if record is None:
        return event_dict
    for key, value in vars(record).items():
        if key in _RECORD_ATTRIBUTES or key in _EXTRA_DENIED or key.startswith("_"):
            continue
        if key == "data" and isinstance(value, dict) and "traceback" in value:
            # Celery's task records repeat the traceback that ``exception`` carries.
            value = {k: v for k, v in value.items() if k != "traceback"}
        event_dict.setdefault(key, value)
    return event_dict


class PlainRenderer:
    """``<asctime> <LEVEL> <logger> <message> key=value...`` and the traceback below.

    The prefix is what ``%(asctime)s %(levelname)s %(name)s %(message)s`` gave before
    (local time with milliseconds), which tools reading broker logs rely on.
    """

    _FIRST = ("timestamp", "level", "logger", "event", "exception", "stack")

    def __call__(self, _logger: Any, _method: str, event_dict: dict[str, Any]) -> str:
        record = event_dict.pop("_record", None)
        event_dict.pop("_from_structlog", None)
        created = record.created if record is not None else time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))
        stamp = f"{stamp},{int((created % 1) * 1000):03d}"
        level = str(event_dict.get("level", "info")).upper()
        name = event_dict.get("logger") or (record.name if record is not None else "root")
        parts = [stamp, level, str(name), str(event_dict.get("event", ""))]
        for key, value in event_dict.items():
            if key in self._FIRST:
                continue
            text = value if isinstance(value, str) and value and " " not in value else repr(value)
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        for key in ("stack", "exception"):
            if event_dict.get(key):
                line += "\n" + str(event_dict[key]).rstrip("\n")
        return line


def _shared_processors() -> list[Any]:
    """What every event gets: context, level, logger name, time."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        add_timestamp,
    ]


def configure_structlog() -> None:
    """Route ``structlog.get_logger()`` through the stdlib handlers (idempotent)."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _formatter(renderers: list[Any]) -> structlog.stdlib.ProcessorFormatter:
    configure_structlog()
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*_shared_processors(), add_extra],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            redact_secrets,
            *renderers,
        ],
        # The renderer formats tracebacks itself; the stdlib must not append them again.
        keep_exc_info=False,
        keep_stack_info=False,
    )


def _leading_keys(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """timestamp, level, logger and message first: a line reads well in a terminal too."""
    first = {k: event_dict.pop(k) for k in _JSON_FIRST if k in event_dict}
    return {**first, **event_dict}


_JSON_FIRST = ("timestamp", "level", "logger", "message")


def json_formatter() -> logging.Formatter:
    """The ``json`` formatter (a ``()`` factory for ``LOGGING``)."""
    return _formatter(
        [
            structlog.processors.EventRenamer("message"),
            _leading_keys,
            structlog.processors.JSONRenderer(),
        ]
    )


def plain_formatter() -> logging.Formatter:
    """The ``plain`` formatter (a ``()`` factory for ``LOGGING``)."""
    configure_structlog()
    return structlog.stdlib.ProcessorFormatter(
        # Context variables, but not stdlib ``extra`` fields (Celery's repeat the message).
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            redact_secrets,
            PlainRenderer(),
        ],
        keep_exc_info=False,
        keep_stack_info=False,
    )


class HousekeepingFilter(logging.Filter):
    """Celery's per-task lines for the once-a-second controller tick count as DEBUG.

    Beat sends ``millrace.controller.tick`` every second and the worker logs receiving
    and finishing it at INFO: three lines a second that bury what a person needs (URLs,
    listeners, errors, restarts). Those lines pass only when the root logger is at DEBUG;
    everything else, including the tick's own decisions (fencing, elections), is kept.
    """

    LOGGERS = frozenset({"celery.app.trace", "celery.worker.strategy", "celery.beat"})
    MARKERS = ("millrace.controller.tick", "controller-tick")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name not in self.LOGGERS or record.levelno != logging.INFO:
            return True
        if not any(marker in record.getMessage() for marker in self.MARKERS):
            return True
        return logging.getLogger().isEnabledFor(logging.DEBUG)


def logging_config(fmt: str, level: str = "INFO") -> dict[str, Any]:
    """``settings.LOGGING`` for ``fmt`` (``json`` or ``plain``)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, got {fmt!r}")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": "control_plane.logs.json_formatter"},
            "plain": {"()": "control_plane.logs.plain_formatter"},
        },
        "filters": {"housekeeping": {"()": "control_plane.logs.HousekeepingFilter"}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": fmt,
                "filters": ["housekeeping"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Django's own handlers (a DEBUG-only console, runserver's) would print a
            # second, unformatted copy: everything goes through the root handler instead.
            "django": {"level": "INFO", "propagate": True},
            "django.server": {"level": "INFO", "propagate": True},
            "django.db.backends": {"level": "WARNING"},
        },
    }
