"""SyncGroup (key 14): the leader hands out assignments; members collect theirs. 0-5."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BYTES, INT16, INT32, STRING

KEY = 14
VALID = (0, 5)
FLEXIBLE = (4, None)

REQUEST = message(
    KEY,
    "SyncGroup",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_id", STRING),
    Field("generation_id", INT32),
    Field("member_id", STRING),
    Field("group_instance_id", STRING, versions=(3, None), nullable=(3, None)),
    Field("protocol_type", STRING, versions=(5, None), nullable=(5, None)),
    Field("protocol_name", STRING, versions=(5, None), nullable=(5, None)),
    Field("assignments", Array(Struct(Field("member_id", STRING), Field("assignment", BYTES)))),
)

RESPONSE = message(
    KEY,
    "SyncGroup",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field("error_code", INT16),
    Field("protocol_type", STRING, versions=(5, None), nullable=(5, None)),
    Field("protocol_name", STRING, versions=(5, None), nullable=(5, None)),
    Field("assignment", BYTES),
)
