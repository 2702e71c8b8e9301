"""AlterConfigs (key 33): replace a resource's configs (the pre-KIP-339 API). Versions 0-2."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT8, INT16, INT32, STRING

KEY = 33
VALID = (0, 2)
FLEXIBLE = (2, None)

REQUEST = message(
    KEY,
    "AlterConfigs",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "resources",
        Array(
            Struct(
                Field("resource_type", INT8),
                Field("resource_name", STRING),
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
    Field("validate_only", BOOL),
)

RESPONSE = message(
    KEY,
    "AlterConfigs",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "responses",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable=(0, None)),
                Field("resource_type", INT8),
                Field("resource_name", STRING),
            )
        ),
    ),
)
