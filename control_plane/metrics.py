"""Prometheus metrics of the web tier, and its ``/metrics`` endpoint.

* ``millrace_http_requests_total{method,route,status}`` and
  ``millrace_http_request_duration_seconds{method,route}``, counted by
  :class:`MetricsMiddleware`. ``route`` is the URL pattern that matched
  (``/api/v1/tenants/<tenant_slug>/topics/``; ``control_plane.core.routes``), never the
  path, so tenants, topics and ids cannot multiply the series; requests no pattern matched
  are ``<unmatched>`` and unusual methods are ``other``.
* :func:`metrics_view` serves the default registry (these and prometheus-client's
  process and Python collectors) in the Prometheus text format to callers with
  ``Authorization: Bearer <MILLRACE_METRICS_TOKEN>``, or, when no token is configured,
  to loopback clients only. No credentials: 403; a wrong token: 401.

The Celery worker's metrics are in ``control_plane.celery_metrics``.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest

from control_plane.core.http import client_ip
from control_plane.core.middleware import HybridMiddleware
from control_plane.core.routes import route_label

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Long-polling reads (consumer records) may take tens of seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HTTP_REQUESTS = Counter(
    "millrace_http_requests",
    "HTTP requests answered by the web tier, by URL pattern.",
    ["method", "route", "status"],
)
HTTP_REQUEST_DURATION = Histogram(
    "millrace_http_request_duration_seconds",
    "Time from receiving a request to its response (headers), by URL pattern.",
    ["method", "route"],
    buckets=DURATION_BUCKETS,
)


def _method_label(request: HttpRequest) -> str:
    method = request.method or ""
    return method if method in METHODS else "other"


def _observe(request: HttpRequest, status: int, started: float) -> None:
    method, route = _method_label(request), route_label(request)
    HTTP_REQUESTS.labels(method, route, str(status)).inc()
    HTTP_REQUEST_DURATION.labels(method, route).observe(time.perf_counter() - started)


class MetricsMiddleware(HybridMiddleware):
    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
        except Exception:
            _observe(request, 500, started)
            raise
        _observe(request, response.status_code, started)  # type: ignore[union-attr]
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        try:
            response = await self.get_response(request)  # type: ignore[misc]
        except Exception:
            _observe(request, 500, started)
            raise
        _observe(request, response.status_code, started)
        return response


def _is_loopback(address: str | None) -> bool:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _denied(status: int, text: str) -> HttpResponse:
    response = HttpResponse(text + "\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the caller may read the metrics, else the answer to give them."""
    token: str = settings.MILLRACE_METRICS_TOKEN
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    presented = presented.strip()
    if token and scheme.lower() == "bearer" and presented:
        if hmac.compare_digest(presented.encode(), token.encode()):
            return None
        return _denied(401, "wrong metrics token")
    if not token and _is_loopback(client_ip(request)):
        return None
    if token:
        return _denied(403, "metrics need Authorization: Bearer <MILLRACE_METRICS_TOKEN>")
    return _denied(403, "metrics are served to loopback clients only (no MILLRACE_METRICS_TOKEN)")


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of the default registry (see the module docs)."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    response = HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response
