"""ListGroups (key 16): the groups a broker coordinates. Versions 0-5."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, STRING

KEY = 16
VALID = (0, 5)
FLEXIBLE = (3, None)

REQUEST = message(
    KEY,
    "ListGroups",
    "request",
    VALID,
    FLEXIBLE,
    Field("states_filter", Array(STRING), versions=(4, None)),
    Field("types_filter", Array(STRING), versions=(5, None)),
)

RESPONSE = message(
    KEY,
    "ListGroups",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field("error_code", INT16),
    Field(
        "groups",
        Array(
            Struct(
                Field("group_id", STRING),
                Field("protocol_type", STRING),
                Field("group_state", STRING, versions=(4, None)),
                Field("group_type", STRING, versions=(5, None)),
            )
        ),
    ),
)
