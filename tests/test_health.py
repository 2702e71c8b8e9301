"""The web tier's probes: /healthz (liveness, asks nothing) and /readyz (readiness)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError
from django.test import Client

from control_plane.core import views

pytestmark = pytest.mark.django_db


def test_liveness_asks_no_dependency(django_assert_num_queries):
    with django_assert_num_queries(0):
        response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_ready_when_database_and_cache_answer():
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "cache": "ok"}}


def test_unready_when_the_cache_is_down(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
        }
    }
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["cache"].startswith("failed (")
    assert "127.0.0.1:1" not in response.content.decode()  # no server names


def test_unready_when_the_database_is_down():
    failing = mock.patch.object(
        views.connection, "cursor", side_effect=OperationalError("server closed the connection")
    )
    with failing:
        response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {
        "database": "failed (OperationalError)",
        "cache": "ok",
    }


def test_probes_and_scrapes_are_answered_for_a_pod_ip_host(settings):
    """Kubelet and Prometheus send the pod's IP as Host: the probes and /metrics answer
    it, while every other path still refuses a host outside ALLOWED_HOSTS."""
    settings.ALLOWED_HOSTS = ["console.example.com"]
    settings.MILLRACE_METRICS_TOKEN = "t" * 40
    client = Client(HTTP_HOST="10.244.1.7:8000")
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    scrape = client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + "t" * 40)
    assert scrape.status_code == 200 and b"millrace_http_requests_total" in scrape.content
    assert client.get("/metrics").status_code == 403  # the token is still required
    assert client.post("/healthz").status_code == 405
    assert client.get("/api/v1/tenants/").status_code == 400  # DisallowedHost
    assert client.get("/healthz/").status_code == 400  # only the exact paths
