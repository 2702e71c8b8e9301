"""Kafka's ACL model and the authorizer that answers "may P do O on R?".

Semantics follow Kafka's standard authorizer:

* a binding matches a request when its principal is the requester or the wildcard
  ``User:*``, its host is the requester's host or ``*``, and its resource pattern covers
  the resource (LITERAL: equal name or the name ``*``; PREFIXED: the name starts with it);
* any matching DENY wins over every ALLOW;
* ``ALL`` covers every operation; ``DESCRIBE`` is implied by an ALLOW of READ, WRITE,
  DELETE or ALTER, and ``DESCRIBE_CONFIGS`` by an ALLOW of ALTER_CONFIGS (implication
  never applies to DENY, as in Kafka);
* with no matching ALLOW the answer is no (default deny).

Pure functions over immutable values: safe to call from any thread or task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
WILDCARD_RESOURCE = "*"
CLUSTER_RESOURCE_NAME = "kafka-cluster"


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    TRANSACTIONAL_ID = "transactional_id"

    @property
    def kafka_code(self) -> int:
        return _RESOURCE_CODES[self]


class PatternType(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"

    @property
    def kafka_code(self) -> int:
        return _PATTERN_CODES[self]


class Operation(StrEnum):
    ALL = "all"
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    DESCRIBE_CONFIGS = "describe_configs"
    ALTER_CONFIGS = "alter_configs"
    IDEMPOTENT_WRITE = "idempotent_write"

    @property
    def kafka_code(self) -> int:
        return _OPERATION_CODES[self]


class Permission(StrEnum):
    ALLOW = "allow"
    DENY = "deny"

    @property
    def kafka_code(self) -> int:
        return _PERMISSION_CODES[self]


# Kafka's wire codes (org.apache.kafka.common.resource / acl enums).
_RESOURCE_CODES = {
    ResourceType.TOPIC: 2,
    ResourceType.GROUP: 3,
    ResourceType.CLUSTER: 4,
    ResourceType.TRANSACTIONAL_ID: 5,
}
_PATTERN_CODES = {PatternType.LITERAL: 3, PatternType.PREFIXED: 4}
_OPERATION_CODES = {
    Operation.ALL: 2,
    Operation.READ: 3,
    Operation.WRITE: 4,
    Operation.CREATE: 5,
    Operation.DELETE: 6,
    Operation.ALTER: 7,
    Operation.DESCRIBE: 8,
    Operation.DESCRIBE_CONFIGS: 10,
    Operation.ALTER_CONFIGS: 11,
    Operation.IDEMPOTENT_WRITE: 12,
}
_PERMISSION_CODES = {Permission.DENY: 2, Permission.ALLOW: 3}

# Which operations make sense on which resource (Kafka's operation/resource table).
VALID_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.ALL,
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {
            Operation.ALL,
            Operation.READ,
            Operation.DESCRIBE,
            Operation.DELETE,
        }
    ),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.ALL,
            Operation.CREATE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset(
        {
            Operation.ALL,
            Operation.WRITE,
            Operation.DESCRIBE,
        }
    ),
}

# ALLOW of any of these also allows the key operation.
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {
            Operation.DESCRIBE,
            Operation.READ,
            Operation.WRITE,
            Operation.DELETE,
            Operation.ALTER,
        }
    ),
    Operation.DESCRIBE_CONFIGS: frozenset(
        {
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
}


class InvalidAclBinding(ValueError):
    """A binding that Kafka would reject; ``field`` names the offending part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class AclBinding:
    """One ACL row. ``id`` identifies the stored rule for explanations (may be None)."""

    principal: str
    resource_type: ResourceType
    pattern_type: PatternType
    resource_name: str
    operation: Operation
    permission: Permission
    host: str = WILDCARD_HOST
    id: int | None = None

    def validate(self) -> None:
        if not self.principal.startswith("User:") or len(self.principal) == len("User:"):
            raise InvalidAclBinding("principal", "principal must look like 'User:<name>'")
        if not self.resource_name:
            raise InvalidAclBinding("resource_name", "resource name must not be empty")
        if self.operation not in VALID_OPERATIONS[self.resource_type]:
            allowed = ", ".join(sorted(op.value for op in VALID_OPERATIONS[self.resource_type]))
            raise InvalidAclBinding(
                "operation",
                f"operation {self.operation.value!r} does not apply to "
                f"{self.resource_type.value} resources (allowed: {allowed})",
            )
        if self.resource_type is ResourceType.CLUSTER and (
            self.pattern_type is not PatternType.LITERAL
            or self.resource_name != CLUSTER_RESOURCE_NAME
        ):
            raise InvalidAclBinding(
                "resource_name",
                f"cluster ACLs use the literal resource name {CLUSTER_RESOURCE_NAME!r}",
            )
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD_RESOURCE:
            raise InvalidAclBinding(
                "resource_name", "a prefixed pattern cannot be '*'; use a literal '*'"
            )

    def covers_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD_RESOURCE)

    def matches_requester(self, principal: str, host: str) -> bool:
        return self.principal in (principal, WILDCARD_PRINCIPAL) and self.host in (
            host,
            WILDCARD_HOST,
        )


@dataclass(frozen=True)
class Decision:
    """The answer and the rule that decided it (None when nothing matched: default deny)."""

    allowed: bool
    binding: AclBinding | None

    @property
    def reason(self) -> str:
        if self.binding is None:
            return "denied: no ACL allows this (default deny)"
        verb = "allowed" if self.allowed else "denied"
        b = self.binding
        return (
            f"{verb} by {b.permission.value} {b.operation.value} on {b.resource_type.value} "
            f"{b.pattern_type.value} {b.resource_name!r} for {b.principal} from host {b.host}"
        )

    def __bool__(self) -> bool:
        return self.allowed


def authorize(
    bindings: Iterable[AclBinding],
    *,
    principal: str,
    host: str,
    operation: Operation,
    resource_type: ResourceType,
    resource_name: str,
) -> Decision:
    """Decide whether ``principal`` at ``host`` may do ``operation`` on the resource."""
    if operation is Operation.ALL:
        raise ValueError("authorize a concrete operation, not ALL")
    allowing = _IMPLIED_BY.get(operation, frozenset({operation})) | {Operation.ALL}
    denying = frozenset({operation, Operation.ALL})
    first_allow: AclBinding | None = None
    for binding in bindings:
        if not binding.matches_requester(principal, host):
            continue
        if not binding.covers_resource(resource_type, resource_name):
            continue
        if binding.permission is Permission.DENY and binding.operation in denying:
            return Decision(False, binding)
        if (
            binding.permission is Permission.ALLOW
            and binding.operation in allowing
            and first_allow is None
        ):
            first_allow = binding
    if first_allow is not None:
        return Decision(True, first_allow)
    return Decision(False, None)
