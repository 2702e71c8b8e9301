"""SaslHandshake (key 17): pick a SASL mechanism before authenticating. Versions 0-1."""

from __future__ import annotations

from data_plane.protocol.schema import NONE, Array, Field, message
from data_plane.protocol.types import INT16, STRING

KEY = 17
VALID = (0, 1)
FLEXIBLE = NONE

REQUEST = message(
    KEY,
    "SaslHandshake",
    "request",
    VALID,
    FLEXIBLE,
    Field("mechanism", STRING),
)

RESPONSE = message(
    KEY,
    "SaslHandshake",
    "response",
    VALID,
    FLEXIBLE,
    Field("error_code", INT16),
    Field("mechanisms", Array(STRING)),
)
