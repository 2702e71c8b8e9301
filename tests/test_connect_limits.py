"""A tenant's Connect limits: connectors, and their tasks.max summed (no brokers)."""

from __future__ import annotations

import pytest

from control_plane.connect.services import ConnectError, InvalidConfig, within_limits
from control_plane.tenancy.models import Tenant


def test_connectors_and_tasks_are_counted_against_the_tenants_limits() -> None:
    tenant = Tenant(slug="t", max_connectors=2, max_connector_tasks=5)
    existing = {"a": {"tasks.max": "3"}}
    within_limits(tenant, existing, "b", {"tasks.max": "2"})  # 2 connectors, 5 tasks: fine
    within_limits(tenant, existing, "a", {"tasks.max": "5"})  # a replaced, not added
    with pytest.raises(InvalidConfig) as tasks:
        within_limits(tenant, existing, "b", {"tasks.max": "3"})
    assert "at most 2 here" in tasks.value.errors["tasks.max"][0]
    with pytest.raises(ConnectError, match="may have 2 connectors"):
        within_limits(tenant, {**existing, "b": {}}, "c", {})
