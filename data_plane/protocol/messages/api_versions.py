"""ApiVersions (key 18): which APIs and versions the broker speaks. Versions 0-4."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import INT16, INT32, INT64, STRING

KEY = 18
VALID = (0, 4)
FLEXIBLE = (3, None)

REQUEST = message(
    KEY,
    "ApiVersions",
    "request",
    VALID,
    FLEXIBLE,
    Field("client_software_name", STRING, versions=(3, None)),
    Field("client_software_version", STRING, versions=(3, None)),
)

RESPONSE = message(
    KEY,
    "ApiVersions",
    "response",
    VALID,
    FLEXIBLE,
    Field("error_code", INT16),
    Field(
        "api_keys",
        Array(
            Struct(
                Field("api_key", INT16),
                Field("min_version", INT16),
                Field("max_version", INT16),
            )
        ),
    ),
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field(
        "supported_features",
        Array(
            Struct(
                Field("name", STRING),
                Field("min_version", INT16),
                Field("max_version", INT16),
            )
        ),
        versions=(3, None),
        tag=0,
        tagged=(3, None),
    ),
    Field(
        "finalized_features_epoch", INT64, versions=(3, None), tag=1, tagged=(3, None), default=-1
    ),
    Field(
        "finalized_features",
        Array(
            Struct(
                Field("name", STRING),
                Field("max_version_level", INT16),
                Field("min_version_level", INT16),
            )
        ),
        versions=(3, None),
        tag=2,
        tagged=(3, None),
    ),
)
