"""Health and the error handlers that answer API paths with the API's error body."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.http import require_GET

from control_plane.core.errors import error_body


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness plus a metadata-store round trip."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok", "database": connection.vendor})


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not_found", f"no API endpoint at {request.path}"), status=404)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        body = error_body("server_error", "internal server error; it has been logged")
        return JsonResponse(body, status=500)
    return defaults.server_error(request)
