"""ConsumerGroupDescribe (key 69, KIP-848): a consumer-protocol group's epochs, assignor
and members with their current and target assignments. Versions 0-1 (v1 adds each
member's type: 0 classic, 1 consumer)."""

from __future__ import annotations

from data_plane.protocol.schema import Array, Field, Struct, message
from data_plane.protocol.types import BOOL, INT8, INT16, INT32, STRING, UUID

KEY = 69
VALID = (0, 1)
FLEXIBLE = (0, None)

REQUEST = message(
    KEY,
    "ConsumerGroupDescribe",
    "request",
    VALID,
    FLEXIBLE,
    Field("group_ids", Array(STRING)),
    Field("include_authorized_operations", BOOL),
)

_ASSIGNMENT = Struct(
    Field(
        "topic_partitions",
        Array(
            Struct(
                Field("topic_id", UUID),
                Field("topic_name", STRING),
                Field("partitions", Array(INT32)),
            )
        ),
    )
)

RESPONSE = message(
    KEY,
    "ConsumerGroupDescribe",
    "response",
    VALID,
    FLEXIBLE,
    Field("throttle_time_ms", INT32),
    Field(
        "groups",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable=(0, None)),
                Field("group_id", STRING),
                Field("group_state", STRING),
                Field("group_epoch", INT32),
                Field("assignment_epoch", INT32),
                Field("assignor_name", STRING),
                Field(
                    "members",
                    Array(
                        Struct(
                            Field("member_id", STRING),
                            Field("instance_id", STRING, nullable=(0, None)),
                            Field("rack_id", STRING, nullable=(0, None)),
                            Field("member_epoch", INT32),
                            Field("client_id", STRING),
                            Field("client_host", STRING),
                            Field("subscribed_topic_names", Array(STRING)),
                            Field("subscribed_topic_regex", STRING, nullable=(0, None)),
                            Field("assignment", _ASSIGNMENT),
                            Field("target_assignment", _ASSIGNMENT),
                            Field("member_type", INT8, versions=(1, None), default=-1),
                        )
                    ),
                ),
                Field("authorized_operations", INT32, default=-(2**31)),
            )
        ),
    ),
)
