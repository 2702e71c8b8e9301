"""Name rules hold to the last character: ``$`` would let a trailing newline through."""

from __future__ import annotations

import pytest

from control_plane.access import services as access_services
from control_plane.core.errors import InvalidInput
from control_plane.tenancy import services as tenancy_services
from tests.conftest import SYSTEM

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("slug", ["acme\n", "acme\r\n", "-acme", "Acme", "a" * 51])
def test_bad_tenant_slugs_are_refused(slug):
    with pytest.raises(InvalidInput) as err:
        tenancy_services.create_tenant(SYSTEM, slug=slug, name="Acme")
    assert err.value.field == "slug"


@pytest.mark.parametrize("name", ["app\n", "app\r\n", ".app", "a" * 65, "app/x"])
def test_bad_service_account_names_are_refused(tenant_a, name):
    with pytest.raises(InvalidInput) as err:
        access_services.create_service_account(SYSTEM, tenant_a, name=name)
    assert err.value.field == "name"


def test_good_names_still_pass(tenant_a):
    tenancy_services.create_tenant(SYSTEM, slug="a-1", name="A")
    access_services.create_service_account(SYSTEM, tenant_a, name="App_1.x-y")
