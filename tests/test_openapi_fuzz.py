"""Schema-driven fuzzing: every operation in /api/schema/, with generated input, never 5xx.

Runs in-process against the WSGI app as two callers: an API key with full ACLs and a
session of an operator who owns the tenant, so both the key and the role paths are
exercised past authentication. ``tenant_slug`` is pinned to the real tenant so requests
reach the views' validation rather than stopping at 404.
"""

from __future__ import annotations

import secrets

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from control_plane.catalog import services as catalog_services
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import Role
from control_plane.wsgi import application
from tests.conftest import FULL_ACCESS, SYSTEM, basic_auth, make_user

# Loaded at collection: serving the schema needs no database.
schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture(autouse=True)
def _keep_test_connection():
    # As Django's test client does: keep the test transaction's connection open across
    # requests (Django closes connections at request end when autocommit is off).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def key_caller(db, tenant_a, make_key):
    catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=2)
    _, key, secret = make_key(tenant_a, FULL_ACCESS, name="fuzzer")
    return {"headers": {"Authorization": basic_auth(key.key_id, secret)}, "cookies": {}}


@pytest.fixture
def session_caller(db, tenant_a, client):
    catalog_services.create_topic(SYSTEM, tenant_a, name="orders", partition_count=2)
    user = make_user("fuzz-op", staff=True)
    tenancy_services.add_member(SYSTEM, tenant_a, user=user, role=Role.OWNER)
    client.force_login(user)
    csrf = secrets.token_hex(16)
    return {
        "headers": {"X-CSRFToken": csrf},
        "cookies": {"sessionid": client.cookies["sessionid"].value, "csrftoken": csrf},
    }


def call_and_check(case, caller):
    if "tenant_slug" in (case.path_parameters or {}):
        case.path_parameters["tenant_slug"] = "acme"
    response = case.call(headers=caller["headers"], cookies=caller["cookies"])
    if _no_broker(case, response):
        return
    case.validate_response(response, checks=[not_a_server_error])


def _no_broker(case, response) -> bool:
    """The Connect API reads and writes the tenant's Connect topics on the brokers, and no
    broker runs here: its one 5xx answer allowed is the documented 503 saying so (its
    behaviour with brokers is tested in tests/broker/test_connect_rest.py)."""
    if "/connect/" not in case.path or response.status_code != 503:
        return False
    return response.json() == {"error_code": 503, "message": "no broker is running"}


FUZZ = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


@schema.parametrize()
@FUZZ
def test_no_5xx_as_api_key(case, key_caller):
    call_and_check(case, key_caller)


@schema.parametrize()
@FUZZ
def test_no_5xx_as_session(case, session_caller):
    call_and_check(case, session_caller)
