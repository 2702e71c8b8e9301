"""CreateAcls (key 30): add ACL bindings. Versions 0-3 (v0: literal patterns only)."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT8, INT16, INT32, STRING

KEY = 30
VALID = (0, 3)
FLEXIBLE = (2, None)
PATTERN_TYPE_LITERAL = 3

REQUEST = message(
    KEY,
    "CreateAcls",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "creations",
        Array(
            Struct(
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field(
                    "resource_pattern_type",
                    INT8,
                    versions=(1, None),
                    default=PATTERN_TYPE_LITERAL,
                ),
                Field("principal", STRING),
                Field("host", STRING),
                Field("operation", INT8),
                Field("permission_type", INT8),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "CreateAcls",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "results",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable=(0, None)),
            )
        ),
    ),
)
