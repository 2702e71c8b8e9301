"""SaslAuthenticate (key 36): one round of SASL authentication bytes. Versions 0-2."""

from __future__ import annotations

from data_plane.protocol.schema import Field, message
from data_plane.protocol.types import BYTES, INT16, INT64, STRING

KEY = 36
VALID = (0, 2)
FLEXIBLE = (2, None)

REQUEST = message(
    KEY,
    "SaslAuthenticate",
    "request",
    VALID,
    FLEXIBLE,
    Field("auth_bytes", BYTES),
)

RESPONSE = message(
    KEY,
    "SaslAuthenticate",
    "response",
    VALID,
    FLEXIBLE,
    Field("error_code", INT16),
    Field("error_message", STRING, nullable=(0, None)),
    Field("auth_bytes", BYTES),
    Field("session_lifetime_ms", INT64, versions=(1, None)),
)
