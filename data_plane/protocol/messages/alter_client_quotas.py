"""AlterClientQuotas (key 49, KIP-546): set or remove quota values on client entities
(``user``, ``client-id``), one result per entity. Versions 0-1; v1 is flexible."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, FLOAT64, INT16, INT32, STRING

KEY = 49
VALID = (0, 1)
FLEXIBLE = (1, None)

_ENTITY = Field(
    "entity",
    Array(
        Struct(
            Field("entity_type", STRING),
            Field("entity_name", STRING, nullable=(0, None)),
        )
    ),
)

REQUEST = message(
    KEY,
    "AlterClientQuotas",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "entries",
        Array(
            Struct(
                _ENTITY,
                Field(
                    "ops",
                    Array(
                        Struct(
                            Field("key", STRING),
                            Field("value", FLOAT64),
                            Field("remove", BOOL),
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
    "AlterClientQuotas",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "entries",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable=(0, None)),
                _ENTITY,
            )
        ),
    ),
)
