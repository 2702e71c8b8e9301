"""IncrementalAlterConfigs (key 44): set, delete, append or subtract configs. Versions 0-1."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT8, INT16, INT32, STRING

KEY = 44
VALID = (0, 1)
FLEXIBLE = (1, None)

REQUEST = message(
    KEY,
    "IncrementalAlterConfigs",
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
                            Field("config_operation", INT8),
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
    "IncrementalAlterConfigs",
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
