"""DescribeTopicPartitions (key 75, KIP-966): topics' partitions, a page at a time.
Version 0.

A request names topics (none: every topic the caller may describe), the most partitions
to answer, and optionally a cursor (a topic and partition to start at); the answer's
``next_cursor`` is where the next page starts, or null when nothing is left."""

from __future__ import annotations

from data_plane.protocol.messages.metadata import AUTHORIZED_OPERATIONS_OMITTED
from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT16, INT32, STRING, UUID

KEY = 75
VALID = (0, 0)
FLEXIBLE = (0, None)
DEFAULT_PARTITION_LIMIT = 2000


def _cursor(name: str) -> Field:
    return Field(
        name,
        Struct(Field("topic_name", STRING), Field("partition_index", INT32)),
        nullable=(0, None),
    )


REQUEST = message(
    KEY,
    "DescribeTopicPartitions",
    "request",
    VALID,
    FLEXIBLE,
    Field("topics", Array(Struct(Field("name", STRING)))),
    Field("response_partition_limit", INT32, default=DEFAULT_PARTITION_LIMIT),
    _cursor("cursor"),
)

RESPONSE = message(
    KEY,
    "DescribeTopicPartitions",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "topics",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("name", STRING, nullable=(0, None)),
                Field("topic_id", UUID),
                Field("is_internal", BOOL),
                Field(
                    "partitions",
                    Array(
                        Struct(
                            Field("error_code", INT16),
                            Field("partition_index", INT32),
                            Field("leader_id", INT32),
                            Field("leader_epoch", INT32, default=-1),
                            Field("replica_nodes", Array(INT32)),
                            Field("isr_nodes", Array(INT32)),
                            Field("eligible_leader_replicas", Array(INT32), nullable=(0, None)),
                            Field("last_known_elr", Array(INT32), nullable=(0, None)),
                            Field("offline_replicas", Array(INT32)),
                        )
                    ),
                ),
                Field(
                    "topic_authorized_operations",
                    INT32,
                    default=AUTHORIZED_OPERATIONS_OMITTED,
                ),
            )
        ),
    ),
    _cursor("next_cursor"),
)
