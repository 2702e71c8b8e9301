"""DeleteGroups (key 42): delete empty groups and their offsets. Versions 0-2."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, STRING

KEY = 42
VALID = (0, 2)
FLEXIBLE = (2, None)

REQUEST = message(
    KEY, "DeleteGroups", "request", VALID, FLEXIBLE, Field("groups_names", Array(STRING))
)

RESPONSE = message(
    KEY,
    "DeleteGroups",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("results", Array(Struct(Field("group_id", STRING), Field("error_code", INT16)))),
)
