"""The read-only list of a tenant's client quotas (set over Kafka's AlterClientQuotas)."""

from __future__ import annotations

from control_plane.tenancy import services as tenancy_services
from tests.conftest import SYSTEM, session_client


def _set(tenant, entity, changes):
    tenancy_services.alter_client_quotas(SYSTEM, tenant, entity=entity, changes=changes)


def test_a_tenant_lists_only_its_own_client_quotas(tenant_a, tenant_b, viewer, make_key):
    _set(tenant_a, (("user", "alice"),), {"producer_byte_rate": 1000})
    _set(tenant_a, (("client-id", None), ("user", None)), {"consumer_byte_rate": 20})
    _set(tenant_b, (("user", "alice"),), {"producer_byte_rate": 5})
    response = session_client(viewer).get("/api/v1/tenants/acme/client-quotas/")
    assert response.status_code == 200
    rows = response.json()["results"]
    assert sorted((r["user"], r["client_id"], r["key"], r["value"]) for r in rows) == [
        ("<default>", "<default>", "consumer_byte_rate", 20.0),
        ("alice", None, "producer_byte_rate", 1000.0),
    ]
    # A key needs DescribeConfigs on the cluster, as Kafka's DescribeClientQuotas.
    describer, _, _ = make_key(tenant_a, [("cluster", "literal", "kafka-cluster", "describe")])
    assert describer.get("/api/v1/tenants/acme/client-quotas/").status_code == 403
    configs, _, _ = make_key(
        tenant_a, [("cluster", "literal", "kafka-cluster", "describe_configs")]
    )
    assert len(configs.get("/api/v1/tenants/acme/client-quotas/").json()["results"]) == 2
