"""DescribeClientQuotas (key 48, KIP-546): the quotas set on client entities (``user``,
``client-id``) that match a filter. Versions 0-1; v1 is flexible."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, FLOAT64, INT8, INT16, INT32, STRING

KEY = 48
VALID = (0, 1)
FLEXIBLE = (1, None)

REQUEST = message(
    KEY,
    "DescribeClientQuotas",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "components",
        Array(
            Struct(
                Field("entity_type", STRING),
                Field("match_type", INT8),
                Field("match", STRING, nullable=(0, None)),
            )
        ),
    ),
    Field("strict", BOOL),
)

RESPONSE = message(
    KEY,
    "DescribeClientQuotas",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field("error_code", INT16),
    Field("error_message", STRING, nullable=(0, None)),
    Field(
        "entries",
        Array(
            Struct(
                Field(
                    "entity",
                    Array(
                        Struct(
                            Field("entity_type", STRING),
                            Field("entity_name", STRING, nullable=(0, None)),
                        )
                    ),
                ),
                Field("values", Array(Struct(Field("key", STRING), Field("value", FLOAT64)))),
            )
        ),
        nullable=(0, None),
    ),
)
