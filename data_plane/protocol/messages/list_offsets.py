"""ListOffsets (key 2): look up partition offsets by timestamp. Versions 0-10."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT8, INT16, INT32, INT64, STRING

KEY = 2
VALID = (0, 10)
FLEXIBLE = (6, None)

REQUEST = message(
    KEY,
    "ListOffsets",
    "request",
    VALID,
    FLEXIBLE,
    Field("replica_id", INT32),
    Field("isolation_level", INT8, versions=(2, None)),
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
                            Field("current_leader_epoch", INT32, versions=(4, None), default=-1),
                            Field("timestamp", INT64),
                            Field("max_num_offsets", INT32, versions=(0, 0), default=1),
                        )
                    ),
                ),
            )
        ),
    ),
    Field("timeout_ms", INT32, versions=(10, None)),
)

RESPONSE = message(
    KEY,
    "ListOffsets",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(2, None)),
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
                            Field("error_code", INT16),
                            Field("old_style_offsets", Array(INT64), versions=(0, 0)),
                            Field("timestamp", INT64, versions=(1, None), default=-1),
                            Field("offset", INT64, versions=(1, None), default=-1),
                            Field("leader_epoch", INT32, versions=(4, None), default=-1),
                        )
                    ),
                ),
            )
        ),
    ),
)
