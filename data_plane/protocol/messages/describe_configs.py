"""DescribeConfigs (key 32): the configs of topics, brokers and other resources. Versions 0-4."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT8, INT16, INT32, STRING

KEY = 32
VALID = (0, 4)
FLEXIBLE = (4, None)

REQUEST = message(
    KEY,
    "DescribeConfigs",
    "request",
    VALID,
    FLEXIBLE,
    Field(
        "resources",
        Array(
            Struct(
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field("configuration_keys", Array(STRING), nullable=(0, None)),
            )
        ),
    ),
    Field("include_synonyms", BOOL, versions=(1, None)),
    Field("include_documentation", BOOL, versions=(3, None)),
)

RESPONSE = message(
    KEY,
    "DescribeConfigs",
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
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field(
                    "configs",
                    Array(
                        Struct(
                            Field("name", STRING),
                            Field("value", STRING, nullable=(0, None)),
                            Field("read_only", BOOL),
                            Field("is_default", BOOL, versions=(0, 0)),
                            Field("config_source", INT8, versions=(1, None), default=-1),
                            Field("is_sensitive", BOOL),
                            Field(
                                "synonyms",
                                Array(
                                    Struct(
                                        Field("name", STRING, versions=(1, None)),
                                        Field(
                                            "value",
                                            STRING,
                                            versions=(1, None),
                                            nullable=(1, None),
                                        ),
                                        Field("source", INT8, versions=(1, None)),
                                    )
                                ),
                                versions=(1, None),
                            ),
                            Field("config_type", INT8, versions=(3, None)),
                            Field("documentation", STRING, versions=(3, None), nullable=(3, None)),
                        )
                    ),
                ),
            )
        ),
    ),
)
