"""The Connect fleet's principal (``__millrace-connect@<tenant>``): it runs a tenant's
Connect cluster, so it may use that cluster's topics and group and nothing of the
tenant's data; tenant ACLs never widen it, and it exists only while its tenant does."""

from __future__ import annotations

from data_plane import internal_auth
from data_plane.acl import Operation, ResourceType
from data_plane.broker.handlers.context import RequestContext
from tests.broker_unit.test_handlers import world

__all__ = ["world"]

CONFIGS, OFFSETS, STATUS = internal_auth.CONNECT_TOPICS


def test_the_connect_principal_may_use_only_its_clusters_topics_and_group(world):
    store, _node, services, acme, _globex = world
    store.add_topic(acme, "orders", partitions=1)
    principal = store.principal_for_key(internal_auth.connect_username("acme"))
    assert principal is not None and principal.internal and principal.tenant_slug == "acme"
    ctx = RequestContext(services, principal, "127.0.0.1", 0, "unit-test")
    for topic in (CONFIGS, OFFSETS, STATUS):
        for op in (Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.CREATE):
            assert ctx.may(op, ResourceType.TOPIC, topic), (op, topic)
        assert not ctx.may(Operation.DELETE, ResourceType.TOPIC, topic)
        assert not ctx.may(Operation.ALTER_CONFIGS, ResourceType.TOPIC, topic)
    for op in (Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.CREATE):
        assert not ctx.may(op, ResourceType.TOPIC, "orders"), op  # the tenant's data
    assert ctx.may(Operation.READ, ResourceType.GROUP, internal_auth.CONNECT_GROUP)
    assert not ctx.may(Operation.READ, ResourceType.GROUP, "connect-out")  # a sink's group
    assert not ctx.may(Operation.READ, ResourceType.TRANSACTIONAL_ID, "connect-cluster-x-0")
    assert ctx.may_cluster(Operation.IDEMPOTENT_WRITE)
    assert not ctx.may_cluster(Operation.ALTER)
    assert not ctx.may_cluster(Operation.CREATE)


def test_the_connect_principal_exists_while_its_tenant_does(world):
    store, *_ = world
    user = internal_auth.connect_username("acme")
    assert store.scram_credentials(user, "SCRAM-SHA-512") is not None
    assert store.principal_for_key(internal_auth.connect_username("nobody")) is None
    assert (
        store.scram_credentials(internal_auth.connect_username("nobody"), "SCRAM-SHA-512") is None
    )
    assert internal_auth.connect_tenant(user) == "acme"
    assert internal_auth.connect_tenant(internal_auth.CONNECT_PREFIX) is None
    assert internal_auth.tenant_slug(user) is None  # not the read-only internal reader
