"""FindCoordinator (key 10): which broker coordinates a group. Versions 0-6."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT8, INT16, INT32, STRING

KEY = 10
VALID = (0, 6)
FLEXIBLE = (3, None)

REQUEST = message(
    KEY,
    "FindCoordinator",
    "request",
    VALID,
    FLEXIBLE,
    Field("key", STRING, versions=(0, 3)),
    Field("key_type", INT8, versions=(1, None)),
    Field("coordinator_keys", Array(STRING), versions=(4, None)),
)

RESPONSE = message(
    KEY,
    "FindCoordinator",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field("error_code", INT16, versions=(0, 3)),
    Field("error_message", STRING, versions=(1, 3), nullable=(1, 3)),
    Field("node_id", INT32, versions=(0, 3)),
    Field("host", STRING, versions=(0, 3)),
    Field("port", INT32, versions=(0, 3)),
    Field(
        "coordinators",
        Array(
            Struct(
                Field("key", STRING),
                Field("node_id", INT32),
                Field("host", STRING),
                Field("port", INT32),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable=(4, None)),
            )
        ),
        versions=(4, None),
    ),
)
