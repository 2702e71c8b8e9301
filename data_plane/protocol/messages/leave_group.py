"""LeaveGroup (key 13): members leave a group (v3+ several at once). Versions 0-5."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, STRING

KEY = 13
VALID = (0, 5)
FLEXIBLE = (4, None)

REQUEST = message(
    KEY,
    "LeaveGroup",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_id", STRING),
    Field("member_id", STRING, versions=(0, 2)),
    Field(
        "members",
        Array(
            Struct(
                Field("member_id", STRING),
                Field("group_instance_id", STRING, nullable=(3, None)),
                Field("reason", STRING, versions=(5, None), nullable=(5, None)),
            )
        ),
        versions=(3, None),
    ),
)

RESPONSE = message(
    KEY,
    "LeaveGroup",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field("error_code", INT16),
    Field(
        "members",
        Array(
            Struct(
                Field("member_id", STRING),
                Field("group_instance_id", STRING, nullable=(3, None)),
                Field("error_code", INT16),
            )
        ),
        versions=(3, None),
    ),
)
