"""JoinGroup (key 11): join a group and take part in its rebalance. Versions 0-9."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, BYTES, INT16, INT32, STRING

KEY = 11
VALID = (0, 9)
FLEXIBLE = (6, None)

REQUEST = message(
    KEY,
    "JoinGroup",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_id", STRING),
    Field("session_timeout_ms", INT32),
    Field("rebalance_timeout_ms", INT32, versions=(1, None), default=-1),
    Field("member_id", STRING),
    Field("group_instance_id", STRING, versions=(5, None), nullable=(5, None)),
    Field("protocol_type", STRING),
    Field("protocols", Array(Struct(Field("name", STRING), Field("metadata", BYTES)))),
    Field("reason", STRING, versions=(8, None), nullable=(8, None)),
)

RESPONSE = message(
    KEY,
    "JoinGroup",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(2, None)),
    Field("error_code", INT16),
    Field("generation_id", INT32, default=-1),
    Field("protocol_type", STRING, versions=(7, None), nullable=(7, None)),
    Field("protocol_name", STRING, nullable=(7, None)),
    Field("leader", STRING),
    Field("skip_assignment", BOOL, versions=(9, None)),
    Field("member_id", STRING),
    Field(
        "members",
        Array(
            Struct(
                Field("member_id", STRING),
                Field("group_instance_id", STRING, versions=(5, None), nullable=(5, None)),
                Field("metadata", BYTES),
            )
        ),
    ),
)
