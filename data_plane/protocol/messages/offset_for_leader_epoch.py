"""OffsetForLeaderEpoch (key 23): where a leader epoch ends. Versions 0-4.

Followers ask it to find where their log diverges from the leader's (KIP-101/279);
consumers ask it to check their position after a leader change (KIP-320).
"""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 23
VALID = (0, 4)
FLEXIBLE = (4, None)

REQUEST = message(
    KEY,
    "OffsetForLeaderEpoch",
    "request",
    VALID,
    FLEXIBLE,
    Field("replica_id", INT32, versions=(3, None), default=-2),
    Field(
        "topics",
        Array(
            Struct(
                Field("topic", STRING),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("partition", INT32),
                            Field("current_leader_epoch", INT32, versions=(2, None), default=-1),
                            Field("leader_epoch", INT32),
                        )
                    ),
                ),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "OffsetForLeaderEpoch",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(2, None)),
    Field(
        "topics",
        Array(
            Struct(
                Field("topic", STRING),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("error_code", INT16),
                            Field("partition", INT32),
                            Field("leader_epoch", INT32, versions=(1, None), default=-1),
                            Field("end_offset", INT64, default=-1),
                        )
                    ),
                ),
            )
        ),
    ),
)
