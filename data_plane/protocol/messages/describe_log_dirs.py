"""DescribeLogDirs (key 35): the partitions a broker holds logs for, and their sizes.
Versions 0-4.

``topics`` null asks for every topic and partition. A broker answers only for itself (a
client asks each broker); Millrace brokers have one log directory each, so ``results`` holds
one entry, or none when the principal may not describe the cluster (v3+ also set the
top-level ``error_code``).
"""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT16, INT32, INT64, STRING

KEY = 35
VALID = (0, 4)
FLEXIBLE = (2, None)
UNKNOWN_BYTES = -1  # total_bytes / usable_bytes when the volume could not be measured

REQUEST = message(
    KEY,
    "DescribeLogDirs",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "topics",
        Array(
            Struct(
                Field("topic", STRING),
                Field("partitions", Array(INT32)),
            )
        ),
        nullable=(0, None),
    ),
)

RESPONSE = message(
    KEY,
    "DescribeLogDirs",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16, versions=(3, None)),
    Field(
        "results",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("log_dir", STRING),
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
                                        Field("partition_size", INT64),
                                        Field("offset_lag", INT64),
                                        Field("is_future_key", BOOL),
                                    )
                                ),
                            ),
                        )
                    ),
                ),
                Field("total_bytes", INT64, versions=(4, None), default=UNKNOWN_BYTES),
                Field("usable_bytes", INT64, versions=(4, None), default=UNKNOWN_BYTES),
            )
        ),
    ),
)
