"""The data API's tests run against real broker processes (tests/broker/conftest.py)."""

from __future__ import annotations

import pytest

from tests.broker.conftest import kafka  # noqa: F401 - the module-scoped broker fixture


@pytest.fixture(autouse=True)
def _key_hashes(settings):
    # The broker fixture's keys were hashed (Argon2) before tests/conftest.py switched to a
    # fast hasher; the web tier must still verify them.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]
