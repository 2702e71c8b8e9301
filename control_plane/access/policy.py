"""What each action on a tenant's resources requires: a role for users, an ACL for API keys.

One table per resource, keyed by the REST action name (``list``, ``retrieve``, ``create``,
...). The REST viewsets (``control_plane.api.views``) check every request against them,
and the console (``frontend``) checks its pages against the same entries and hides what
the role cannot do, so the console can never allow what the API refuses. An action
missing from its table is refused: deny by default.

Pure policy: data and no behaviour; how a Need is checked is
:meth:`control_plane.access.caller.Access.require` (and ``frontend.console.Page.require``).
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.tenancy.models import Role
from data_plane.acl import Operation, ResourceType

VIEWER, DEVELOPER, ADMIN, OWNER = Role.VIEWER, Role.DEVELOPER, Role.ADMIN, Role.OWNER
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP


@dataclass(frozen=True)
class Need:
    """What one API action requires: a minimum role for users, an ACL operation for keys.

    ``role=None`` closes the action to users, ``operation=None`` to API keys. For
    ``ResourceType.TOPIC`` the view supplies the topic name (URL, body, or per row).
    """

    role: str | None
    operation: Operation | None
    resource_type: ResourceType = ResourceType.CLUSTER


# People and roles: for users only (a key manages no memberships).
MEMBERSHIP_NEEDS = {
    "list": Need(VIEWER, None),
    "retrieve": Need(VIEWER, None),
    "create": Need(ADMIN, None),
    "partial_update": Need(ADMIN, None),
    "destroy": Need(ADMIN, None),
    "transfer_ownership": Need(OWNER, None),
}

# Invitations by e-mail (Step 15): the member managers' business; not for API keys.
INVITATION_NEEDS = {
    "list": Need(ADMIN, None),
    "retrieve": Need(ADMIN, None),
    "create": Need(ADMIN, None),
    "destroy": Need(ADMIN, None),
}

TOPIC_NEEDS = {
    "list": Need(VIEWER, Operation.DESCRIBE, TOPIC),
    "retrieve": Need(VIEWER, Operation.DESCRIBE, TOPIC),
    "create": Need(DEVELOPER, Operation.CREATE, TOPIC),
    "destroy": Need(DEVELOPER, Operation.DELETE, TOPIC),
    "configs": Need(VIEWER, Operation.DESCRIBE_CONFIGS, TOPIC),
    "alter_configs": Need(DEVELOPER, Operation.ALTER_CONFIGS, TOPIC),
    "partitions": Need(VIEWER, Operation.DESCRIBE, TOPIC),
    "add_partitions": Need(DEVELOPER, Operation.ALTER, TOPIC),
}

# As Kafka's DescribeGroups/OffsetFetch (Describe), AlterConsumerGroupOffsets (Read on the
# group; the view also checks Read on every topic reset) and DeleteGroups (Delete).
GROUP_NEEDS = {
    "list": Need(VIEWER, Operation.DESCRIBE, GROUP),
    "retrieve": Need(VIEWER, Operation.DESCRIBE, GROUP),
    "lag_history": Need(VIEWER, Operation.DESCRIBE, GROUP),
    "reset_offsets": Need(DEVELOPER, Operation.READ, GROUP),
    "destroy": Need(DEVELOPER, Operation.DELETE, GROUP),
}

CLUSTER_READ = Need(VIEWER, Operation.DESCRIBE)
CLUSTER_WRITE = Need(ADMIN, Operation.ALTER)
# Keys and ACLs: read with Describe on the cluster, create/delete with Alter (as Kafka's
# DescribeAcls / CreateAcls / DeleteAcls do).
CLUSTER_OBJECT_NEEDS = {
    "list": CLUSTER_READ,
    "retrieve": CLUSTER_READ,
    "create": CLUSTER_WRITE,
    "destroy": CLUSTER_WRITE,
}

SERVICE_ACCOUNT_NEEDS = {
    "list": CLUSTER_READ,
    "retrieve": CLUSTER_READ,
    "create": CLUSTER_WRITE,
    "partial_update": CLUSTER_WRITE,
    "destroy": CLUSTER_WRITE,
}
API_KEY_NEEDS = CLUSTER_OBJECT_NEEDS
ACL_NEEDS = CLUSTER_OBJECT_NEEDS

# Client quotas: read-only here (set with Kafka's AlterClientQuotas); DescribeConfigs on the
# cluster for keys, as Kafka's DescribeClientQuotas.
CLIENT_QUOTA_NEEDS = {"list": Need(VIEWER, Operation.DESCRIBE_CONFIGS)}
# Which client software and request versions connect: Describe on the cluster for keys.
CLIENT_VERSION_NEEDS = {"list": CLUSTER_READ}
# Alert rules (docs/alerts.md): read by every member; made, changed and deleted by admins
# (a rule sends the tenant's state to addresses and URLs it names).
ALERT_RULE_NEEDS = {**SERVICE_ACCOUNT_NEEDS, "deliveries": CLUSTER_READ}
# Metered usage (docs/usage.md): every member; a key with Describe on the cluster.
USAGE_NEEDS = {"list": CLUSTER_READ}

AUDIT_NEEDS = {
    "list": Need(ADMIN, Operation.DESCRIBE),
    "retrieve": Need(ADMIN, Operation.DESCRIBE),
}
