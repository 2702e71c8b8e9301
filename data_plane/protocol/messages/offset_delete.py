"""OffsetDelete (key 47): drop committed offsets of partitions a group no longer reads. 0."""

from __future__ import annotations

from data_plane.protocol.schema import NONE, Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, STRING

KEY = 47
VALID = (0, 0)
FLEXIBLE = NONE

REQUEST = message(
    KEY,
    "OffsetDelete",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_id", STRING),
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field("partitions", Array(Struct(Field("partition_index", INT32)))),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "OffsetDelete",
    "response",
    VALID,
    FLEXIBLE,
    Field("error_code", INT16),
    Field("throttle_time_ms", INT32),
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(Struct(Field("partition_index", INT32), Field("error_code", INT16))),
                ),
            )
        ),
    ),
)
