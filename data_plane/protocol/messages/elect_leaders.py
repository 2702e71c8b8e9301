"""ElectLeaders (key 43): elect the preferred (or, v1+, any live) replica. Versions 0-2."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT8, INT16, INT32, STRING

KEY = 43
VALID = (0, 2)
FLEXIBLE = (2, None)

PREFERRED = 0
UNCLEAN = 1

REQUEST = message(
    KEY,
    "ElectLeaders",
    "request",
    VALID,
    FLEXIBLE,
    Field("election_type", INT8, versions=(1, None)),
    Field(
        "topic_partitions",
        Array(Struct(Field("topic", STRING), Field("partitions", Array(INT32)))),
        nullable=(0, None),
    ),
    Field("timeout_ms", INT32, default=60000),
)

RESPONSE = message(
    KEY,
    "ElectLeaders",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16, versions=(1, None)),
    Field(
        "replica_election_results",
        Array(
            Struct(
                Field("topic", STRING),
                Field(
                    "partition_result",
                    Array(
                        Struct(
                            Field("partition_id", INT32),
                            Field("error_code", INT16),
                            Field("error_message", STRING, nullable=(0, None)),
                        )
                    ),
                ),
            )
        ),
    ),
)
