"""DeleteAcls (key 31): remove the ACLs that match filters. Versions 0-3 (v0: literal only)."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT8, INT16, INT32, STRING

KEY = 31
VALID = (0, 3)
FLEXIBLE = (2, None)
PATTERN_TYPE_LITERAL = 3

REQUEST = message(
    KEY,
    "DeleteAcls",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "filters",
        Array(
            Struct(
                Field("resource_type_filter", INT8),
                Field("resource_name_filter", STRING, nullable=(0, None)),
                Field(
                    "pattern_type_filter", INT8, versions=(1, None), default=PATTERN_TYPE_LITERAL
                ),
                Field("principal_filter", STRING, nullable=(0, None)),
                Field("host_filter", STRING, nullable=(0, None)),
                Field("operation", INT8),
                Field("permission_type", INT8),
            )
        ),
    ),
)

RESPONSE = message(
    KEY,
    "DeleteAcls",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "filter_results",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable=(0, None)),
                Field(
                    "matching_acls",
                    Array(
                        Struct(
                            Field("error_code", INT16),
                            Field("error_message", STRING, nullable=(0, None)),
                            Field("resource_type", INT8),
                            Field("resource_name", STRING),
                            Field(
                                "pattern_type",
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
        ),
    ),
)
