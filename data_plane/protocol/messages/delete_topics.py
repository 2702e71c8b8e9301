"""DeleteTopics (key 20): delete topics by name or (from v6) by topic ID. Versions 0-6."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, STRING, UUID

KEY = 20
VALID = (0, 6)
FLEXIBLE = (4, None)

REQUEST = message(
    KEY,
    "DeleteTopics",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "topics",
        Array(
            Struct(
                Field("name", STRING, versions=(6, None), nullable=(6, None)),
                Field("topic_id", UUID, versions=(6, None)),
            )
        ),
        versions=(6, None),
    ),
    Field("topic_names", Array(STRING), versions=(0, 5)),
    Field("timeout_ms", INT32),
)

RESPONSE = message(
    KEY,
    "DeleteTopics",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field(
        "responses",
        Array(
            Struct(
                Field("name", STRING, nullable=(6, None)),
                Field("topic_id", UUID, versions=(6, None)),
                Field("error_code", INT16),
                Field("error_message", STRING, versions=(5, None), nullable=(5, None)),
            )
        ),
    ),
)
