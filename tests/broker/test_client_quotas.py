"""Client quotas (KIP-546) against a real broker process: AlterClientQuotas and
DescribeClientQuotas over raw sockets (neither confluent-kafka 2.16.1's AdminClient nor
kafka-python 3.0.12's KafkaAdminClient has the calls), tenant isolation, the tenant's limit
as the ceiling, and a confluent-kafka producer throttled by its principal's quota (its
``throttle_cb`` reports the broker's throttle_time_ms; no timing is asserted)."""

from __future__ import annotations

import pytest

from control_plane.audit.models import AuditEvent
from control_plane.tenancy.models import ClientQuota, Tenant
from data_plane.protocol.errors import ErrorCode as E
from data_plane.protocol.messages import alter_client_quotas, describe_client_quotas
from tests.broker.conftest import confluent_conf
from tests.broker.test_clients import topic_name
from tests.broker.test_wire import RawClient

pytestmark = pytest.mark.django_db


def raw(env, key) -> RawClient:
    client = RawClient(env)
    client.login(key)
    return client


def alter(env, key, entity, ops, *, version=1, validate_only=False) -> dict:
    client = raw(env, key)
    try:
        body = {
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "ops": [
                        {"key": k, "value": 0.0 if v is None else float(v), "remove": v is None}
                        for k, v in ops.items()
                    ],
                }
            ],
            "validate_only": validate_only,
        }
        [entry] = client.request(alter_client_quotas.KEY, version, body)["entries"]
        return entry
    finally:
        client.close()


def describe(env, key, components=(), *, strict=False, version=1) -> dict:
    client = raw(env, key)
    try:
        body = {
            "components": [
                {"entity_type": t, "match_type": m, "match": name} for t, m, name in components
            ],
            "strict": strict,
        }
        return client.request(describe_client_quotas.KEY, version, body)
    finally:
        client.close()


def entities(answer) -> dict:
    return {
        tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]): {
            v["key"]: v["value"] for v in entry["values"]
        }
        for entry in answer["entries"]
    }


@pytest.mark.parametrize("version", [0, 1])
def test_quotas_are_altered_described_and_scoped_to_the_tenant(kafka, django_db_blocker, version):
    user = (("user", "admin"),)  # both tenants have a service account named "admin"
    assert (
        alter(kafka, kafka.admin_a, user, {"producer_byte_rate": 4096}, version=version)[
            "error_code"
        ]
        == E.NONE
    )
    assert (
        alter(kafka, kafka.admin_b, user, {"consumer_byte_rate": 512}, version=version)[
            "error_code"
        ]
        == E.NONE
    )
    ours = describe(kafka, kafka.admin_a, [("user", 0, "admin")], version=version)
    assert ours["error_code"] == E.NONE
    assert entities(ours) == {user: {"producer_byte_rate": 4096.0}}
    theirs = describe(kafka, kafka.admin_b, [("user", 2, None)], strict=True, version=version)
    assert entities(theirs) == {user: {"consumer_byte_rate": 512.0}}
    with django_db_blocker.unblock():
        assert ClientQuota.objects.filter(tenant__slug=kafka.tenant_a).count() == 1
        assert AuditEvent.objects.filter(
            tenant__slug=kafka.tenant_a, action="tenant.alter_client_quotas"
        ).exists()
    # Clean up for the other tests of this module.
    for key in (kafka.admin_a, kafka.admin_b):
        alter(kafka, key, user, {"producer_byte_rate": None, "consumer_byte_rate": None})
    assert entities(describe(kafka, kafka.admin_a)) == {}


def test_refusals(kafka, django_db_blocker):
    alice = (("user", "alice"),)
    # No DescribeConfigs / AlterConfigs on the cluster: refused.
    refused = describe(kafka, kafka.reader_a)
    assert refused["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    entry = alter(kafka, kafka.reader_a, alice, {"producer_byte_rate": 10})
    assert entry["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
    with django_db_blocker.unblock():
        limit = Tenant.objects.get(slug=kafka.tenant_a).produce_byte_rate
    over = alter(kafka, kafka.admin_a, alice, {"producer_byte_rate": limit + 1})
    assert over["error_code"] == E.POLICY_VIOLATION
    assert f"{limit} bytes/s" in over["error_message"]
    unenforced = alter(kafka, kafka.admin_a, alice, {"request_percentage": 10})
    assert unenforced["error_code"] == E.INVALID_REQUEST
    ip = alter(kafka, kafka.admin_a, (("ip", "127.0.0.1"),), {"producer_byte_rate": 10})
    assert ip["error_code"] == E.INVALID_REQUEST
    dry = alter(kafka, kafka.admin_a, alice, {"producer_byte_rate": 10}, validate_only=True)
    assert dry["error_code"] == E.NONE
    assert entities(describe(kafka, kafka.admin_a)) == {}


def test_a_producer_over_its_principals_quota_is_throttled(kafka):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = topic_name("quota")
    admin = AdminClient(confluent_conf(kafka, kafka.admin_a))
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    throttles: list[int] = []

    def produce_some() -> None:
        conf = confluent_conf(kafka, kafka.admin_a, acks="all")
        conf["linger.ms"] = 50
        conf["throttle_cb"] = lambda event: throttles.append(event.throttle_time)
        producer = Producer(conf)
        for _ in range(20):
            producer.produce(name, b"x" * 1000)
        assert producer.flush(30) == 0
        producer.poll(0.5)  # serve the throttle callback

    produce_some()
    assert throttles == []  # the tenant's 50 MiB/s is far away
    # 10 kB/s on this principal and client id's default: 20 kB is about a second over.
    entity = (("client-id", None), ("user", "admin"))
    assert alter(kafka, kafka.admin_a, entity, {"producer_byte_rate": 10_000})["error_code"] == 0
    try:
        produce_some()
        assert throttles and max(throttles) > 0
    finally:
        alter(kafka, kafka.admin_a, entity, {"producer_byte_rate": None})
