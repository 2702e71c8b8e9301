"""Which client software and request versions connect, end to end: a real broker process
folds what its connections sent and reports it to Postgres every second here (every
minute by default); the tenant's API and console show it, another tenant sees nothing.
confluent-kafka names itself in ApiVersions v3+ (KIP-511); a raw client names itself too,
then sends Produce v2 (message format v1, which Kafka 4 refuses) and a Metadata version
no broker serves."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from control_plane.catalog.models import ClientVersion
from control_plane.tenancy.models import Tenant
from data_plane.protocol.errors import ErrorCode
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import confluent_create, topic_name
from tests.broker.test_wire import METADATA, RawClient, legacy_set, produce
from tests.conftest import key_client

pytestmark = pytest.mark.django_db(transaction=True)

API_VERSIONS = 18


@pytest.fixture(autouse=True)
def _key_hashes(settings):
    # The broker fixture's keys were hashed (Argon2) before tests/conftest.py switched to
    # a fast hasher; the REST API must still verify them.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


def _wait_for(tenant: Tenant, software: str, api_key: int, served: bool = True):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = ClientVersion.objects.filter(
            tenant=tenant, software_name=software, api_key=api_key, served=served
        )
        if found.exists():
            return list(found)
        time.sleep(0.3)
    raise AssertionError(f"no report of {software} API {api_key} (served={served})")


def test_brokers_report_client_versions_and_the_tenant_sees_them(kafka):
    tenant = Tenant.objects.get(slug=kafka.tenant_a)
    name = topic_name("versions")
    confluent_create(kafka, kafka.admin_a, name, partitions=1)

    producer = Producer(confluent_conf(kafka, kafka.admin_a, **{"client.id": "orders-app"}))
    producer.produce(name, b"v")
    assert producer.flush(30) == 0

    raw = RawClient(kafka)
    asked = {"client_software_name": "legacy-app", "client_software_version": "0.9.1"}
    assert raw.request(API_VERSIONS, 3, asked)["error_code"] == 0
    raw.login(kafka.admin_a)
    entry = produce(raw, name, legacy_set(1, 0, [(None, b"old")]), version=2)
    assert entry["error_code"] == ErrorCode.NONE
    raw.raw_request(METADATA, 99, b"\x00" * 16)  # answered UNSUPPORTED_VERSION
    raw.close()

    modern = _wait_for(tenant, "confluent-kafka-python", 0)
    assert {r.client_id for r in modern} == {"orders-app"}
    assert all(r.api_version >= 3 and r.principal == kafka.admin_a.principal for r in modern)
    old = _wait_for(tenant, "legacy-app", 0)
    assert [(r.api_version, r.requests, r.software_version) for r in old] == [(2, 1, "0.9.1")]
    refused = _wait_for(tenant, "legacy-app", 3, served=False)
    assert [(r.api_version, r.requests) for r in refused] == [(99, 1)]

    api = key_client(kafka.admin_a.key_id, kafka.admin_a.secret)
    rows = api.get(f"/api/v1/tenants/{kafka.tenant_a}/client-versions/").json()["results"]
    flagged = {
        (r["software_name"], r["api"], r["api_version"]) for r in rows if r["kafka4_refuses"]
    }
    assert ("legacy-app", "Produce", 2) in flagged
    assert not any(
        r["software_name"] == "confluent-kafka-python" for r in rows if r["kafka4_refuses"]
    )
    other = key_client(kafka.admin_b.key_id, kafka.admin_b.secret)
    theirs = other.get(f"/api/v1/tenants/{kafka.tenant_b}/client-versions/").json()["results"]
    assert not any(r["software_name"] == "legacy-app" for r in theirs)
