"""DescribeGroups (key 15): state, protocol and members of groups. Versions 0-6.

v6 (KIP-1043) adds a per-group ``error_message`` and answers GROUP_ID_NOT_FOUND for a
group that does not exist (older versions describe it as an empty Dead group)."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, BYTES, INT16, INT32, STRING

KEY = 15
VALID = (0, 6)
FLEXIBLE = (5, None)

REQUEST = message(
    KEY,
    "DescribeGroups",
    "request",
    VALID,
    FLEXIBLE,
    Field("groups", Array(STRING)),
    Field("include_authorized_operations", BOOL, versions=(3, None)),
)

RESPONSE = message(
    KEY,
    "DescribeGroups",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32, versions=(1, None)),
    Field(
        "groups",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("error_message", STRING, versions=(6, None), nullable=(6, None)),
                Field("group_id", STRING),
                Field("group_state", STRING),
                Field("protocol_type", STRING),
                Field("protocol_data", STRING),
                Field(
                    "members",
                    Array(
                        Struct(
                            Field("member_id", STRING),
                            Field(
                                "group_instance_id",
                                STRING,
                                versions=(4, None),
                                nullable=(4, None),
                            ),
                            Field("client_id", STRING),
                            Field("client_host", STRING),
                            Field("member_metadata", BYTES),
                            Field("member_assignment", BYTES),
                        )
                    ),
                ),
                Field("authorized_operations", INT32, versions=(3, None), default=-2147483648),
            )
        ),
    ),
)
