"""ACL presets: the usual sets of rights, granted in one step when a service account is made.

A preset only writes ordinary ACLs (``services.create_acl``, audited one by one), so the ACL
pages, the checker and the broker see nothing special. The sets follow what Kafka's tools
and Confluent Cloud grant for each role:

- ``producer``: Write and Describe on the topics, and IdempotentWrite on the cluster (so an
  idempotent producer may start before any of its topics exists; KIP-679);
- ``consumer``: Read and Describe on the topics, and Read and Describe on the groups;
- ``read-only``: Read, Describe and DescribeConfigs on the topics, and Describe on the
  groups and the cluster (it may read and look, not join groups or commit);
- ``topic-admin``: every operation (All) on the topics (create, delete, alter, configure,
  read and write what matches);
- ``transactional-producer``: the producer's rights, and Write and Describe on the
  transactional ids (``transactional.id``: begin, commit and abort transactions);
- ``exactly-once``: a consume-transform-produce application (Kafka Streams at
  ``exactly_once_v2``, a transactional job): Read, Write and Describe on the topics, Read
  and Describe on the groups, Write and Describe on the transactional ids, IdempotentWrite
  on the cluster.

Topics, groups and transactional ids are named like any ACL resource: a literal name
(``*`` for all) or a prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from django.db import transaction

from control_plane.access import services
from control_plane.access.models import Acl, ServiceAccount
from control_plane.core.actor import Actor
from control_plane.core.errors import AlreadyExists, InvalidInput
from control_plane.tenancy.models import Tenant
from data_plane.acl import CLUSTER_RESOURCE_NAME, Operation, PatternType, ResourceType

OP = Operation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID


class Spec(NamedTuple):
    why: str  # what it is for
    rights: list[tuple[ResourceType, Operation]]
    needs_group: bool = False
    needs_transactional_id: bool = False


PRODUCE = [(TOPIC, OP.WRITE), (TOPIC, OP.DESCRIBE), (CLUSTER, OP.IDEMPOTENT_WRITE)]
TRANSACT = [(TXN, OP.WRITE), (TXN, OP.DESCRIBE)]
PRESETS: dict[str, Spec] = {
    "producer": Spec("produce to the topics", PRODUCE),
    "consumer": Spec(
        "consume the topics in the groups",
        [(TOPIC, OP.READ), (TOPIC, OP.DESCRIBE), (GROUP, OP.READ), (GROUP, OP.DESCRIBE)],
        needs_group=True,
    ),
    "read-only": Spec(
        "read and describe the topics, describe groups and the cluster",
        [
            (TOPIC, OP.READ),
            (TOPIC, OP.DESCRIBE),
            (TOPIC, OP.DESCRIBE_CONFIGS),
            (GROUP, OP.DESCRIBE),
            (CLUSTER, OP.DESCRIBE),
        ],
    ),
    "topic-admin": Spec("administer the topics (every operation)", [(TOPIC, OP.ALL)]),
    "transactional-producer": Spec(
        "produce to the topics in transactions", PRODUCE + TRANSACT, needs_transactional_id=True
    ),
    "exactly-once": Spec(
        "consume, transform and produce the topics exactly once",
        [(TOPIC, OP.READ), *PRODUCE, (GROUP, OP.READ), (GROUP, OP.DESCRIBE), *TRANSACT],
        needs_group=True,
        needs_transactional_id=True,
    ),
}
PRESET_CHOICES = list(PRESETS)
PATTERNS = tuple(p.value for p in PatternType)  # how a preset's names match


@dataclass(frozen=True)
class Preset:
    name: str
    topic: str
    topic_pattern: str = PatternType.LITERAL.value
    group: str = ""
    group_pattern: str = PatternType.PREFIXED.value
    transactional_id: str = ""
    transactional_id_pattern: str = PatternType.PREFIXED.value

    def describe(self) -> str:
        def named(kind: str, name: str, pattern: str) -> str:
            if name == "*" and pattern == PatternType.LITERAL.value:
                return f"all {kind}s"
            if pattern == PatternType.PREFIXED.value:
                return f"{kind}s starting {name!r}"
            return f"{kind} {name!r}"

        spec = PRESETS[self.name]
        text = f"{self.name} for {named('topic', self.topic, self.topic_pattern)}"
        if spec.needs_group:
            text += f", {named('group', self.group, self.group_pattern)}"
        if spec.needs_transactional_id:
            ids = named("transactional id", self.transactional_id, self.transactional_id_pattern)
            text += f", {ids}"
        return text


def parse(data: Any, prefix: str = "acl_preset") -> Preset:
    """A preset from a request's mapping, or InvalidInput naming the field."""
    if not isinstance(data, dict):
        raise InvalidInput("must be an object with 'preset' and 'topic'", field=prefix)
    name = str(data.get("preset") or "")
    if name not in PRESETS:
        raise InvalidInput(
            f"unknown preset {name!r}; one of: {', '.join(PRESET_CHOICES)}",
            field=f"{prefix}.preset",
        )
    patterns = [p.value for p in PatternType]
    values: dict[str, str] = {}
    for key, default in (
        ("topic_pattern", "literal"),
        ("group_pattern", "prefixed"),
        ("transactional_id_pattern", "prefixed"),
    ):
        value = str(data.get(key) or default)
        if value not in patterns:
            raise InvalidInput(f"must be one of: {', '.join(patterns)}", field=f"{prefix}.{key}")
        values[key] = value
    topic = str(data.get("topic") or "").strip()
    if not topic:
        raise InvalidInput("name the topic, topic prefix, or '*' for all", field=f"{prefix}.topic")
    spec = PRESETS[name]
    group = str(data.get("group") or "").strip()
    if spec.needs_group and not group:
        raise InvalidInput(
            f"{name} needs a group: a name, a prefix, or '*' for all", field=f"{prefix}.group"
        )
    transactional_id = str(data.get("transactional_id") or "").strip()
    if spec.needs_transactional_id and not transactional_id:
        raise InvalidInput(
            f"{name} needs a transactional id (the clients' transactional.id): a name, a "
            "prefix, or '*' for all",
            field=f"{prefix}.transactional_id",
        )
    return Preset(
        name,
        topic,
        values["topic_pattern"],
        group if spec.needs_group else "",
        values["group_pattern"],
        transactional_id if spec.needs_transactional_id else "",
        values["transactional_id_pattern"],
    )


def grant(actor: Actor, tenant: Tenant, sa: ServiceAccount, preset: Preset) -> list[Acl]:
    """Write the preset's ACLs for ``sa`` (all or none); rights it holds already (another
    preset's, say) are kept as they are, as Kafka's tools treat adding an ACL that
    exists. The ACLs written are returned."""
    rights = PRESETS[preset.name].rights
    made = []
    with transaction.atomic():
        for rtype, operation in rights:
            if rtype is TOPIC:
                name, pattern = preset.topic, preset.topic_pattern
            elif rtype is GROUP:
                name = preset.group or "*"
                pattern = preset.group_pattern if preset.group else PatternType.LITERAL.value
            elif rtype is TXN:
                name, pattern = preset.transactional_id, preset.transactional_id_pattern
            else:
                name, pattern = CLUSTER_RESOURCE_NAME, PatternType.LITERAL.value
            try:
                made.append(
                    services.create_acl(
                        actor,
                        tenant,
                        principal=sa.principal,
                        resource_type=rtype.value,
                        pattern_type=pattern,
                        resource_name=name,
                        operation=operation.value,
                        permission="allow",
                    )
                )
            except AlreadyExists:
                continue
            except InvalidInput as exc:
                # Name the preset's field, not the ACL's, so forms show it in the right place.
                field = {GROUP: "group", TXN: "transactional_id"}.get(rtype, "topic")
                raise InvalidInput(exc.message, field=f"acl_preset.{field}") from None
    return made


def create_with_preset(
    actor: Actor, tenant: Tenant, *, name: str, description: str, preset: Preset | None
) -> tuple[ServiceAccount, list[Acl]]:
    """A service account and its preset's ACLs, in one transaction."""
    with transaction.atomic():
        sa = services.create_service_account(actor, tenant, name=name, description=description)
        acls = grant(actor, tenant, sa, preset) if preset is not None else []
    return sa, acls
