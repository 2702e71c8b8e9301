"""CreatePartitions (key 37): add partitions to existing topics. Versions 0-3."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT16, INT32, STRING

KEY = 37
VALID = (0, 3)
FLEXIBLE = (2, None)

REQUEST = message(
    KEY,
    "CreatePartitions",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field("count", INT32),
                Field(
                    "assignments",
                    Array(Struct(Field("broker_ids", Array(INT32)))),
                    nullable=(0, None),
                ),
            )
        ),
    ),
    Field("timeout_ms", INT32),
    Field("validate_only", BOOL),
)

RESPONSE = message(
    KEY,
    "CreatePartitions",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "results",
        Array(
            Struct(
                Field("name", STRING),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable=(0, None)),
            )
        ),
    ),
)
