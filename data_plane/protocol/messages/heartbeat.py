"""Heartbeat (key 12): a member is alive; learns of rebalances. Versions 0-4."""

from __future__ import annotations

from data_plane.protocol.schema import Field, message
from data_plane.protocol.types import INT16, INT32, STRING

KEY = 12
VALID = (0, 4)
FLEXIBLE = (4, None)

REQUEST = message(
    KEY,
    "Heartbeat",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_id", STRING),
    Field("generation_id", INT32),
    Field("member_id", STRING),
    Field("group_instance_id", STRING, versions=(3, None), nullable=(3, None)),
)

RESPONSE = message(
    KEY,
    "Heartbeat",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field("error_code", INT16),
)
