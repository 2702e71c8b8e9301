"""DeleteRecords (key 21): advance partitions' log start offsets. Versions 0-2."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 21
VALID = (0, 2)
FLEXIBLE = (2, None)

REQUEST = message(
    KEY,
    "DeleteRecords",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("partition_index", INT32),
                            Field("offset", INT64),
                        )
                    ),
                ),
            )
        ),
    ),
    Field("timeout_ms", INT32),
)

RESPONSE = message(
    KEY,
    "DeleteRecords",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("partition_index", INT32),
                            Field("low_watermark", INT64),
                            Field("error_code", INT16),
                        )
                    ),
                ),
            )
        ),
    ),
)
