"""Health and the error handlers that answer API paths with the API's error body."""

from __future__ import annotations

from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from control_plane.core.errors import error_body

READY_KEY = "readyz"


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process serves requests. It asks nothing else, so an outage of the
    database or Redis makes the web tier unready (``readyz``), never restarted for it."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the metadata store and the cache (Redis in production) answer; 503 and
    which failed otherwise (the exception's kind only: messages may name servers)."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        checks["database"] = f"failed ({type(exc).__name__})"
        if not connection.in_atomic_block:
            connection.close()  # the next request connects afresh
    try:
        cache.set(READY_KEY, "1", timeout=10)
        if cache.get(READY_KEY) != "1":
            raise LookupError("the value written was not read back")
        checks["cache"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        checks["cache"] = f"failed ({type(exc).__name__})"
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )


@csrf_exempt  # it changes nothing: a mistyped POST is told "not found", not "CSRF failed"
def api_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not_found", f"no API endpoint at {request.path}"), status=404)


def favicon(request: HttpRequest) -> HttpResponse:
    """The console's icon, for pages without its <link rel="icon"> (API docs, admin); the
    static URL is looked up per request (in production it comes from collectstatic's
    manifest)."""
    return HttpResponsePermanentRedirect(static("frontend/favicon.svg"))


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        body = error_body("server_error", "internal server error; it has been logged")
        return JsonResponse(body, status=500)
    return defaults.server_error(request)
