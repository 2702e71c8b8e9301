"""The browser suite runs against real broker processes (tests/broker/conftest.py)."""

from __future__ import annotations

from tests.broker.conftest import kafka  # noqa: F401 - the module-scoped broker fixture
