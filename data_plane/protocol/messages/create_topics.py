"""CreateTopics (key 19): create topics with partitions, assignments and configs. Versions 0-7."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT8, INT16, INT32, STRING, UUID

KEY = 19
VALID = (0, 7)
FLEXIBLE = (5, None)

REQUEST = message(
    KEY,
    "CreateTopics",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field("num_partitions", INT32),
                Field("replication_factor", INT16),
                Field(
                    "assignments",
                    Array(
                        Struct(
                            Field("partition_index", INT32),
                            Field("broker_ids", Array(INT32)),
                        )
                    ),
                ),
                Field(
                    "configs",
                    Array(
                        Struct(
                            Field("name", STRING),
                            Field("value", STRING, nullable=(0, None)),
                        )
                    ),
                ),
            )
        ),
    ),
    Field("timeout_ms", INT32, default=60000),
    Field("validate_only", BOOL, versions=(1, None)),
)

RESPONSE = message(
    KEY,
    "CreateTopics",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(2, None)),
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING),
                Field("topic_id", UUID, versions=(7, None)),
                Field("error_code", INT16),
                Field("error_message", STRING, versions=(1, None), nullable=(0, None)),
                Field(
                    "topic_config_error_code", INT16, versions=(5, None), tag=0, tagged=(5, None)
                ),
                Field("num_partitions", INT32, versions=(5, None), default=-1),
                Field("replication_factor", INT16, versions=(5, None), default=-1),
                Field(
                    "configs",
                    Array(
                        Struct(
                            Field("name", STRING, versions=(5, None)),
                            Field("value", STRING, versions=(5, None), nullable=(5, None)),
                            Field("read_only", BOOL, versions=(5, None)),
                            Field("config_source", INT8, versions=(5, None), default=-1),
                            Field("is_sensitive", BOOL, versions=(5, None)),
                        )
                    ),
                    versions=(5, None),
                    nullable=(5, None),
                ),
            )
        ),
    ),
)
