"""AlterPartitionReassignments (key 45): start or cancel moving replicas (KIP-455). 0."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, STRING

KEY = 45
VALID = (0, 0)
FLEXIBLE = (0, None)

REQUEST = message(
    KEY,
    "AlterPartitionReassignments",
    "request",
    VALID,
    FLEXIBLE,
    Field("timeout_ms", INT32, default=60000),
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
                            # null cancels the partition's reassignment
                            Field("replicas", Array(INT32), nullable=(0, None)),
                        )
                    ),
                ),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "AlterPartitionReassignments",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("error_message", STRING, nullable=(0, None)),
    Field(
        "responses",
        Array(
            Struct(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("partition_index", INT32),
                            Field("error_code", INT16),
                            Field("error_message", STRING, nullable=(0, None)),
                        )
                    ),
                ),
            )
        ),
    ),
)
