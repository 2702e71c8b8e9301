"""Operations of the web tier: JSON logs with the request's context, secrets redacted,
X-Request-ID, the HTTP metrics and who may read /metrics."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client, RequestFactory
from prometheus_client import REGISTRY

from control_plane import metrics
from control_plane.api import views as api_views
from control_plane.core import routes
from control_plane.logs import json_formatter, logging_config
from tests.conftest import session_client

ROOT = Path(__file__).resolve().parent.parent
TOPICS_ROUTE = "/api/v1/tenants/<tenant_slug>/topics/"
SECRETS = {"password": "hunter2-pw", "api_secret": "s3cret-value", "Token": "tok-value-123"}


@pytest.fixture
def logging_topic_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """The topic list logs a line with secrets from inside the view (its own thread under
    ASGI), as careless code might."""
    original = api_views.TopicViewSet.list

    def list_and_log(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        log = logging.getLogger("millrace.test")
        log.info("listing with %s", dict(SECRETS), extra={"credentials": {"secret": "x1"}})
        structlog.get_logger("millrace.test").info("structured", sessionid="sess-value-9")
        return original(self, request, *args, **kwargs)

    monkeypatch.setattr(api_views.TopicViewSet, "list", list_and_log)


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_request_context_in_json_logs(mode, owner, logging_topic_list):
    # The formatter production's LOGGING names (MILLRACE_LOG_FORMAT=json).
    config = logging_config("json")
    assert config["handlers"]["console"]["formatter"] == "json"
    assert config["formatters"]["json"]["()"] == "control_plane.logs.json_formatter"
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        if mode == "wsgi":
            client: Any = session_client(owner)
            response = client.get(
                "/api/v1/tenants/acme/topics/", headers={"X-Request-ID": "trace-1.a_B"}
            )
        else:
            client = AsyncClient()
            client.force_login(owner)
            response = async_to_sync(client.get)(
                "/api/v1/tenants/acme/topics/", headers={"X-Request-ID": "trace-1.a_B"}
            )
    finally:
        root.removeHandler(handler)
    assert response.status_code == 200
    assert response["X-Request-ID"] == "trace-1.a_B"
    text = stream.getvalue()
    records = [json.loads(line) for line in text.splitlines()]  # one object per line

    in_view = next(
        r for r in records if r["logger"] == "millrace.test" and "listing" in r["message"]
    )
    assert in_view["request_id"] == "trace-1.a_B"
    assert in_view["tenant"] == "acme"
    assert in_view["user_id"] == owner.pk
    assert in_view["method"] == "GET" and in_view["path"] == "/api/v1/tenants/acme/topics/"
    assert in_view["level"] == "info"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", in_view["timestamp"])
    assert in_view["credentials"] == "[redacted]"
    structured = next(r for r in records if r.get("message") == "structured")
    assert structured["sessionid"] == "[redacted]" and structured["request_id"] == "trace-1.a_B"
    for value in [*SECRETS.values(), "x1", "sess-value-9"]:
        assert value not in text
    assert "'password': '[redacted]'" in in_view["message"]

    access = next(r for r in records if r["logger"] == "millrace.http")
    assert access["request_id"] == "trace-1.a_B" and access["tenant"] == "acme"
    assert access["status"] == 200 and access["route"] == TOPICS_ROUTE
    assert "headers" not in access and "body" not in access and "request" not in access


def test_exceptions_are_in_the_json_line():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter())
    log = logging.getLogger("millrace.test.exc")
    log.addHandler(handler)
    log.propagate = False
    try:
        structlog.contextvars.bind_contextvars(tenant="acme")
        try:
            raise ValueError("bad thing with password=hunter2-pw")
        except ValueError:
            log.exception("it failed")
    finally:
        structlog.contextvars.clear_contextvars()
        log.removeHandler(handler)
        log.propagate = True
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "it failed" and record["level"] == "error"
    assert record["tenant"] == "acme"
    assert "ValueError: bad thing with password=[redacted]" in record["exception"]
    assert "hunter2" not in line


@pytest.mark.django_db
@pytest.mark.parametrize(
    "incoming",
    ["x" * 129, "has space", "line\nbreak", "semi;colon", "ünicode", ""],
)
def test_unsafe_request_ids_are_replaced(incoming):
    response = Client().get("/healthz", HTTP_X_REQUEST_ID=incoming)
    assert response["X-Request-ID"] != incoming
    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-ID"])


@pytest.mark.django_db
def test_a_safe_request_id_of_128_characters_is_kept():
    incoming = "A-z_0.9" * 18 + "ab"
    assert len(incoming) == 128
    assert Client().get("/healthz", HTTP_X_REQUEST_ID=incoming)["X-Request-ID"] == incoming


# --- /metrics --------------------------------------------------------------------------------


def _metrics(remote_addr: str, authorization: str | None = None) -> Any:
    extra = {"REMOTE_ADDR": remote_addr}
    if authorization is not None:
        extra["HTTP_AUTHORIZATION"] = authorization
    return metrics.metrics_view(RequestFactory().get("/metrics", **extra))


def test_metrics_without_a_token_are_for_loopback_only(settings):
    settings.MILLRACE_METRICS_TOKEN = ""
    assert _metrics("10.1.2.3").status_code == 403
    assert _metrics("10.1.2.3", "Bearer anything").status_code == 403
    for loopback in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        assert _metrics(loopback).status_code == 200, loopback


def test_metrics_with_a_token(settings):
    settings.MILLRACE_METRICS_TOKEN = "metrics-token-xyz"
    refused = _metrics("10.1.2.3")
    assert refused.status_code == 403 and b"MILLRACE_METRICS_TOKEN" in refused.content
    assert _metrics("127.0.0.1").status_code == 403  # the token is needed from anywhere
    wrong = _metrics("10.1.2.3", "Bearer metrics-token-abc")
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    assert _metrics("10.1.2.3", "Basic metrics-token-xyz").status_code == 403
    ok = _metrics("10.1.2.3", "Bearer metrics-token-xyz")
    assert ok.status_code == 200
    assert ok["Content-Type"].startswith("text/plain; version=")
    body = ok.content.decode()
    assert "# TYPE millrace_http_requests_total counter" in body
    assert "# TYPE millrace_http_request_duration_seconds histogram" in body
    assert "python_info" in body and "process_cpu_seconds_total" in body


@pytest.mark.django_db
def test_metrics_url_through_the_middleware(settings):
    settings.MILLRACE_METRICS_TOKEN = "metrics-token-xyz"
    client = Client(REMOTE_ADDR="10.9.8.7")
    assert client.get("/metrics").status_code == 403
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token-xyz")
    assert ok.status_code == 200 and ok["X-Request-ID"]
    assert client.post("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token-xyz").status_code == 405


def test_probes_and_metrics_are_not_redirected_to_https(settings):
    from django.middleware.security import SecurityMiddleware

    settings.SECURE_SSL_REDIRECT = True
    middleware = SecurityMiddleware(lambda request: None)
    factory = RequestFactory()
    for path in ("/healthz", "/readyz", "/metrics"):
        assert middleware.process_request(factory.get(path)) is None, path
    assert middleware.process_request(factory.get("/api/v1/tenants/")).status_code == 301


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_requests_are_counted_by_route(mode, owner):
    ok = {"method": "GET", "route": TOPICS_ROUTE, "status": "200"}
    timed = {"method": "GET", "route": TOPICS_ROUTE}
    unmatched = {"method": "GET", "route": "<unmatched>", "status": "404"}
    before = (
        _sample("millrace_http_requests_total", ok),
        _sample("millrace_http_request_duration_seconds_count", timed),
        _sample("millrace_http_requests_total", unmatched),
    )
    if mode == "wsgi":
        client: Any = session_client(owner)
        get = client.get
    else:
        client = AsyncClient()
        client.force_login(owner)
        get = async_to_sync(client.get)
    for _ in range(3):
        assert get("/api/v1/tenants/acme/topics/").status_code == 200
    assert get("/no/such/page-12345/").status_code == 404
    after = (
        _sample("millrace_http_requests_total", ok),
        _sample("millrace_http_request_duration_seconds_count", timed),
        _sample("millrace_http_requests_total", unmatched),
    )
    assert after[0] - before[0] == 3
    assert after[1] - before[1] == 3
    assert after[2] - before[2] == 1
    routes = {
        sample.labels["route"]
        for family in REGISTRY.collect()
        if family.name == "millrace_http_requests"
        for sample in family.samples
    }
    assert TOPICS_ROUTE in routes
    assert not [r for r in routes if "acme" in r or "12345" in r], routes


@pytest.mark.parametrize(
    ("route", "readable"),
    [
        ("api/v1/^tenants/(?P<tenant_slug>[a-z0-9-]+)/topics/$", TOPICS_ROUTE),
        (
            "api/v1/^tenants/(?P<tenant_slug>[a-z0-9-]+)/topics/(?P<topic_name>[^/]+)"
            "/partitions/(?P<partition>[0-9]{1,9})/records/$",
            "/api/v1/tenants/<tenant_slug>/topics/<topic_name>/partitions/<partition>/records/",
        ),
        ("t/<slug:tenant_slug>/topics/<str:name>/", "/t/<slug:tenant_slug>/topics/<str:name>/"),
        ("admin/^(?P<app_label>auth|tenancy)/$", "/admin/<app_label>/"),
        ("^api/", "/api/"),
        ("", "/"),
        ("metrics", "/metrics"),
    ],
)
def test_readable_route(route, readable):
    assert routes.readable_route(route) == readable


# --- settings ---------------------------------------------------------------------------------


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in {"MILLRACE_LOG_FORMAT", "MILLRACE_ENV", "DEBUG", "SECRET_KEY"}
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**environ, "DJANGO_SETTINGS_MODULE": "control_plane.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION = {
    "MILLRACE_ENV": "production",
    "SECRET_KEY": "k" * 20 + "abcdefghijklmnopqrstuvwxyz0123456789",
    "ALLOWED_HOSTS": "millrace.example.com",
}


def test_production_logs_json_lines_by_default():
    code = (
        "import django, logging; django.setup();"
        "logging.getLogger('millrace.check').warning('hello %s', {'password': 'pw-1'});"
        "logging.getLogger('django.request').error('boom')"
    )
    result = _python(code, **PRODUCTION)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert [(r["logger"], r["level"]) for r in lines] == [
        ("millrace.check", "warning"),
        ("django.request", "error"),
    ]
    assert lines[0]["message"] == "hello {'password': '[redacted]'}"


def test_log_format_is_checked():
    result = _python("import django; django.setup()", MILLRACE_LOG_FORMAT="xml")
    assert result.returncode != 0
    assert "MILLRACE_LOG_FORMAT must be one of json, plain, got 'xml'" in result.stderr
    plain = _python(
        "import django, logging, structlog; django.setup();"
        "structlog.contextvars.bind_contextvars(request_id='r-1');"
        "logging.getLogger('millrace.check').warning('hello')",
        MILLRACE_LOG_FORMAT="plain",
    )
    assert plain.returncode == 0, plain.stderr
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING millrace\.check hello request_id=r-1\n",
        plain.stderr,
    ), plain.stderr


def test_the_controller_ticks_celery_lines_count_as_debug():
    """Three lines a second from Celery about the controller tick are DEBUG; other tasks'
    lines and every other logger stay."""
    import logging

    from control_plane.logs import HousekeepingFilter

    def record(name, msg, args):
        return logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)

    tick = [
        record("celery.beat", "Scheduler: Sending due task %s (%s)", ("controller-tick", "x")),
        record("celery.worker.strategy", "Task %s[%s] received", ("millrace.controller.tick", 1)),
        record(
            "celery.app.trace",
            "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s",
            ({"name": "millrace.controller.tick", "id": "1", "runtime": 0.1, "return_value": 0},),
        ),
    ]
    kept = [
        record(
            "celery.app.trace", "Task %s[%s] succeeded", ("millrace.audit.prune_audit_events", 1)
        ),
        record("millrace.controller", "fenced brokers %s (lease expired)", ([2],)),
    ]
    root = logging.getLogger()
    level = root.level
    try:
        root.setLevel(logging.INFO)
        assert [HousekeepingFilter().filter(r) for r in tick] == [False] * 3
        assert [HousekeepingFilter().filter(r) for r in kept] == [True] * 2
        root.setLevel(logging.DEBUG)  # LOG_LEVEL=DEBUG shows them again
        assert all(HousekeepingFilter().filter(r) for r in tick)
    finally:
        root.setLevel(level)
