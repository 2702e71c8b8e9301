"""Who and what a log line is about: the request id, tenant and user of the current request.

:class:`RequestContextMiddleware` gives every HTTP request an id (the caller's
``X-Request-ID`` when it is a safe token, else a new one), binds it with the method and
path into ``structlog.contextvars`` (every log line of the request carries them, see
``control_plane.logs``), answers with the ``X-Request-ID`` header and clears the context
when the response is closed (and before each request). Where the tenant and caller
become known (``resolve_access`` for the REST API, ``member_view`` for the console, the
WebSocket consumers) :func:`bind_tenant` and :func:`bind_user` add them.

It runs both ways: under daphne (ASGI) the chain is async and Django runs sync views in
a thread with a copy of the context (asgiref copies what they bind back); under WSGI and
the test client it is sync. It logs one line per request (``millrace.http``) with the
method, path (never the query string), status and duration: never headers or bodies.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

import structlog
from django.http import HttpRequest, HttpResponse

from control_plane.core.middleware import HybridMiddleware
from control_plane.core.routes import route_label

REQUEST_ID_HEADER = "X-Request-ID"
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
# Probes and scrapes come every few seconds: their lines are DEBUG, not INFO.
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

access_log = logging.getLogger("millrace.http")


def request_id_for(incoming: str | None) -> str:
    """The caller's id when it is a safe token (<= 128 of ``[A-Za-z0-9._-]``), else a new one."""
    if incoming and _SAFE_REQUEST_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


def bind_tenant(slug: str | None) -> None:
    """Add the tenant (its slug) to the context of the current request or connection."""
    if slug:
        structlog.contextvars.bind_contextvars(tenant=slug)


def bind_user(user: Any, api_key: Any = None) -> None:
    """Add the caller: ``user_id`` for a signed-in user, ``api_key`` (its public id) for a key."""
    if api_key is not None:
        structlog.contextvars.bind_contextvars(api_key=api_key.key_id)
        return
    if user is not None and getattr(user, "is_authenticated", False) and user.pk is not None:
        structlog.contextvars.bind_contextvars(user_id=user.pk)


def bind_connection(scope: dict[str, Any], tenant_slug: str | None = None) -> str:
    """Start the context of a WebSocket connection: a new ``connection_id``, its path and
    tenant. Consumers of one socket run in their own task, so this context is theirs."""
    connection_id = uuid.uuid4().hex
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(connection_id=connection_id, path=scope.get("path", ""))
    bind_tenant(tenant_slug)
    return connection_id


class RequestContextMiddleware(HybridMiddleware):
    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        started = self._begin(request)
        try:
            response = self.get_response(request)
        except BaseException:
            structlog.contextvars.clear_contextvars()
            raise
        self._end(request, response, started)  # type: ignore[arg-type]
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        started = self._begin(request)
        try:
            response = await self.get_response(request)  # type: ignore[misc]
        except BaseException:
            structlog.contextvars.clear_contextvars()
            raise
        self._end(request, response, started)
        return response

    @staticmethod
    def _begin(request: HttpRequest) -> float:
        request_id = request_id_for(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(
            request_id=request_id, method=request.method, path=request.path
        )
        return time.perf_counter()

    @staticmethod
    def _end(request: HttpRequest, response: HttpResponse, started: float) -> None:
        response[REQUEST_ID_HEADER] = request.request_id  # type: ignore[attr-defined]
        # Cleared when the response is closed (its body sent), not here: Django logs
        # "Not Found: /path" and the like for 4xx/5xx after the middleware returned.
        response._resource_closers.append(structlog.contextvars.clear_contextvars)
        level = logging.DEBUG if request.path in _QUIET_PATHS else logging.INFO
        if access_log.isEnabledFor(level):
            duration_ms = round((time.perf_counter() - started) * 1000, 1)
            access_log.log(
                level,
                "%s %s %s %sms",
                request.method,
                request.path,
                response.status_code,
                duration_ms,
                extra={
                    "status": response.status_code,
                    "route": route_label(request),
                    "duration_ms": duration_ms,
                },
            )
