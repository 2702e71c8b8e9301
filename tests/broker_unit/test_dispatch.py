"""The broker's dispatch table: every API it advertises has exactly one handler."""

from __future__ import annotations

import inspect

from data_plane.broker.connection import PRE_AUTH_APIS
from data_plane.broker.handlers import DISPATCH
from data_plane.protocol.messages import APIS


def test_every_advertised_api_is_served_once():
    # ApiVersions and SASL are the connection's own; everything else goes to a handler.
    assert set(DISPATCH) | PRE_AUTH_APIS == set(APIS)
    assert not set(DISPATCH) & PRE_AUTH_APIS


def test_each_handler_lives_in_the_module_of_its_api_area():
    for key, handler in DISPATCH.items():
        assert inspect.iscoroutinefunction(handler), APIS[key].name
        assert handler.__module__.startswith("data_plane.broker.handlers."), APIS[key].name
        # handle_<snake_case name of the API>, so a table entry cannot point elsewhere.
        name = "".join("_" + c.lower() if c.isupper() else c for c in APIS[key].name)
        assert handler.__name__ == "handle" + name, (key, handler.__name__)
