"""Request and response shapes of the admin API. Writes go through services, not save()."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.access.presets import PATTERNS, PRESET_CHOICES
from control_plane.accounts.models import Invitation, InvitationStatus
from control_plane.alerts.models import AlertRule, Delivery
from control_plane.audit.models import AuditEvent
from control_plane.catalog.client_versions import api_name
from control_plane.catalog.models import ClientVersion, Partition, Topic
from control_plane.tenancy.models import ClientQuota, Membership, Plan, Role, Tenant
from data_plane.acl import Operation, PatternType, Permission, ResourceType
from data_plane.protocol.compat import KAFKA4_MIN_VERSION
from data_plane.topic_config import TOPIC_CONFIGS, effective_configs

# --- tenants ------------------------------------------------------------------------------


class TenantSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="the caller's role in this tenant")
    partitions_in_use = serializers.SerializerMethodField()
    plan = serializers.SerializerMethodField(
        help_text="the plan its limits come from (null: limits of its own)"
    )

    class Meta:
        model = Tenant
        fields = [
            "slug",
            "name",
            "max_partitions",
            "max_storage_bytes",
            "produce_byte_rate",
            "fetch_byte_rate",
            "default_partitions",
            "max_connectors",
            "max_connector_tasks",
            "created_at",
            "suspended_at",
            "suspension_reason",
            "reads_until",
            "deletion_requested_at",
            "plan",
            "max_connections",
            "max_retention_ms",
            "role",
            "partitions_in_use",
        ]
        read_only_fields = fields

    def get_role(self, tenant: Tenant) -> str | None:
        roles = self.context.get("roles", {})
        return roles.get(tenant.pk)

    def get_plan(self, tenant: Tenant) -> str | None:
        return tenant.plan.slug if tenant.plan_id else None

    def get_partitions_in_use(self, tenant: Tenant) -> int:
        return int(getattr(tenant, "partitions_in_use", 0) or 0)


class TenantSuspendSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=200, allow_blank=True, default="")
    read_grace_seconds = serializers.IntegerField(
        default=72 * 3600,
        help_text="connections open at the time may read this long (0: closed at once)",
    )


class TenantDeleteSerializer(serializers.Serializer):
    confirm = serializers.CharField(
        max_length=50, help_text="the tenant's slug, typed again to confirm its deletion"
    )


class TenantDeletionSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    tenant = serializers.CharField(source="tenant_slug", read_only=True)
    tenant_name = serializers.CharField(read_only=True)
    requested_by = serializers.CharField(source="requested_by_name", read_only=True)
    requested_at = serializers.DateTimeField(read_only=True)
    state = serializers.CharField(read_only=True, help_text="pending, running or done")
    step = serializers.CharField(
        read_only=True,
        help_text="keys, topics, groups, transactions, connect, tenant or brokers",
    )
    progress = serializers.JSONField(read_only=True)
    attempts = serializers.IntegerField(read_only=True)
    last_error = serializers.CharField(read_only=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)


class TenantLimitsMixin(serializers.Serializer):
    max_partitions = serializers.IntegerField(min_value=1, required=False)
    max_storage_bytes = serializers.IntegerField(min_value=1, required=False)
    produce_byte_rate = serializers.IntegerField(min_value=1, required=False)
    fetch_byte_rate = serializers.IntegerField(min_value=1, required=False)
    default_partitions = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        help_text="partitions of topics created without a count (Kafka's num.partitions); "
        "null: the deployment's MILLRACE_DEFAULT_PARTITIONS",
    )
    max_connectors = serializers.IntegerField(
        min_value=1, required=False, help_text="connectors in the tenant's Connect cluster"
    )
    max_connector_tasks = serializers.IntegerField(
        min_value=1, required=False, help_text="the tenant's connectors' tasks.max, summed"
    )
    max_connections = serializers.IntegerField(
        min_value=1, required=False, help_text="authenticated connections on each broker"
    )
    max_retention_ms = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        help_text="the longest retention.ms a topic may have (null: no ceiling)",
    )


class TenantCreateSerializer(TenantLimitsMixin):
    slug = serializers.CharField(max_length=50)
    name = serializers.CharField(max_length=200)
    owner = serializers.CharField(
        required=False, help_text="username of the first owner (defaults to the caller)"
    )
    plan = serializers.CharField(
        max_length=50, required=False, help_text="a plan's slug (default: the default plan)"
    )


class TenantUpdateSerializer(TenantLimitsMixin):
    name = serializers.CharField(max_length=200, required=False)
    plan = serializers.CharField(
        max_length=50, required=False, help_text="staff: move the tenant to this plan"
    )


PLAN_LIMIT_HELP = {
    "max_partitions": "partitions of all topics together",
    "max_storage_bytes": "bytes of partition logs on each broker",
    "produce_byte_rate": "bytes per second produced",
    "fetch_byte_rate": "bytes per second fetched",
    "max_connections": "authenticated connections on each broker",
    "max_connectors": "connectors in the tenant's Connect cluster",
    "max_connector_tasks": "the tenant's connectors' tasks.max, summed",
}


class TenantPlanSerializer(serializers.ModelSerializer):
    tenants = serializers.IntegerField(
        source="tenant_count", read_only=True, help_text="tenants on this plan"
    )

    class Meta:
        model = Plan
        fields = [
            "slug",
            "name",
            "description",
            "is_default",
            "max_partitions",
            "max_storage_bytes",
            "produce_byte_rate",
            "fetch_byte_rate",
            "max_connections",
            "max_retention_ms",
            "max_connectors",
            "max_connector_tasks",
            "tenants",
            "created_at",
        ]
        read_only_fields = ["created_at", "tenants"]
        extra_kwargs = {
            **{name: {"help_text": text} for name, text in PLAN_LIMIT_HELP.items()},
            "max_retention_ms": {"help_text": "the longest retention.ms (null: no ceiling)"},
            "is_default": {"help_text": "the plan of tenants people create themselves"},
            # Checked by the service (with its own messages), not by the model's validators.
            "slug": {"validators": []},
        }


# --- alerts ------------------------------------------------------------------------------


class AlertRuleSerializer(serializers.ModelSerializer):
    firing = serializers.SerializerMethodField(help_text="subjects firing now")
    webhook_secret = serializers.SerializerMethodField(
        help_text="the HMAC key webhooks are signed with: in the answer to the POST only"
    )

    class Meta:
        model = AlertRule
        fields = [
            "id",
            "name",
            "kind",
            "group",
            "measure",
            "limit",
            "connector",
            "threshold",
            "for_seconds",
            "emails",
            "webhook_url",
            "webhook_secret",
            "enabled",
            "firing",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]
        extra_kwargs = {
            "kind": {"help_text": "consumer_lag, usage, connector_failed or key_expiring"},
            "group": {"help_text": "consumer_lag: the group (empty: every group)"},
            "measure": {"help_text": "consumer_lag: records or seconds"},
            "limit": {"help_text": "usage: storage, partitions, produce or fetch"},
            "connector": {"help_text": "connector_failed: the connector (empty: every one)"},
            "threshold": {
                "help_text": "records or seconds of lag, percent of the limit, days before expiry"
            },
            "for_seconds": {"help_text": "how long the breach lasts before the rule fires"},
            # Checked by the service (with its own messages), not by the model's validators.
            "name": {"validators": []},
            "webhook_url": {"validators": []},
        }

    def get_firing(self, rule: AlertRule) -> list[str]:
        return [s.subject for s in rule.states.all() if s.firing]

    def get_webhook_secret(self, rule: AlertRule) -> str | None:
        return self.context.get("webhook_secret") or None


class DeliverySerializer(serializers.ModelSerializer):
    event = serializers.CharField(source="notification.event", read_only=True)
    subject = serializers.CharField(source="notification.subject", read_only=True)
    message = serializers.CharField(source="notification.payload.message", read_only=True)

    class Meta:
        model = Delivery
        fields = [
            "id",
            "event",
            "subject",
            "message",
            "channel",
            "target",
            "state",
            "attempts",
            "next_attempt_at",
            "last_status",
            "last_error",
            "delivered_at",
            "created_at",
        ]
        read_only_fields = fields


# --- members -----------------------------------------------------------------------------


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.get_username", read_only=True)
    email = serializers.SerializerMethodField(
        help_text="shown to operators and to the member themself; null to other members"
    )

    class Meta:
        model = Membership
        fields = ["id", "username", "email", "role", "created_at"]
        read_only_fields = fields

    def get_email(self, membership: Membership) -> str | None:
        request = self.context.get("request")
        viewer = getattr(request, "user", None)
        if viewer is not None and (
            getattr(viewer, "is_staff", False) or viewer.pk == membership.user_id
        ):
            return str(membership.user.email)
        return None


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()


class MembershipCreateSerializer(serializers.Serializer):
    username = serializers.CharField(
        max_length=get_user_model()._meta.get_field("username").max_length
    )
    role = serializers.ChoiceField(choices=Role.choices)


class MembershipUpdateSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class InvitationSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    email = serializers.EmailField(read_only=True)
    role = serializers.ChoiceField(choices=Role.choices, read_only=True)
    status = serializers.ChoiceField(choices=InvitationStatus.choices, read_only=True)
    invited_by = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True)
    accepted_at = serializers.DateTimeField(read_only=True, allow_null=True)
    revoked_at = serializers.DateTimeField(read_only=True, allow_null=True)

    def get_invited_by(self, invitation: Invitation) -> str | None:
        user = invitation.invited_by
        return user.get_username() if user is not None else None


class PersonalTokenSerializer(serializers.Serializer):
    token_id = serializers.CharField(read_only=True)
    name = serializers.CharField(read_only=True)
    state = serializers.CharField(read_only=True, help_text="active, expired or revoked")
    created_at = serializers.DateTimeField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True, allow_null=True)
    last_used_at = serializers.DateTimeField(read_only=True, allow_null=True)
    revoked_at = serializers.DateTimeField(read_only=True, allow_null=True)


class PersonalTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_in_days = serializers.IntegerField(required=False, allow_null=True)


class PersonalTokenCreatedSerializer(PersonalTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="shown in this answer only")


class InvitationCreateSerializer(serializers.Serializer):
    email = serializers.CharField(max_length=254)
    role = serializers.ChoiceField(choices=Role.choices)


class InvitationAcceptSerializer(serializers.Serializer):
    token = serializers.CharField(max_length=200, help_text="the token in the mailed link")


# --- topics -----------------------------------------------------------------------------


class ConfigValueField(serializers.JSONField):
    """A config value: integer, boolean or string (Kafka's string form is accepted too)."""


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {
            "oneOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "string"}]
        },
    }
)
class ConfigMapField(serializers.DictField):
    child = ConfigValueField(allow_null=True)


class TopicSerializer(serializers.ModelSerializer):
    configs = serializers.DictField(read_only=True, help_text="explicit overrides only")

    class Meta:
        model = Topic
        fields = [
            "name",
            "topic_id",
            "partition_count",
            "replication_factor",
            "configs",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class TopicCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=300, trim_whitespace=False)
    partition_count = serializers.IntegerField(min_value=1, max_value=10_000)
    replication_factor = serializers.IntegerField(min_value=1, max_value=32767, required=False)
    configs = ConfigMapField(required=False)


class TopicConfigEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.JSONField()
    default = serializers.JSONField()
    is_default = serializers.BooleanField()
    type = serializers.CharField()
    doc = serializers.CharField()


def topic_config_entries(topic: Topic) -> list[dict[str, Any]]:
    effective = effective_configs(topic.configs)
    return [
        {
            "name": name,
            "value": effective[name],
            "default": definition.default,
            "is_default": name not in topic.configs,
            "type": definition.kind.__name__,
            "doc": definition.doc,
        }
        for name, definition in TOPIC_CONFIGS.items()
    ]


class PartitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Partition
        fields = ["index", "replicas", "leader", "leader_epoch", "isr", "partition_epoch"]
        read_only_fields = fields


class AddPartitionsSerializer(serializers.Serializer):
    partition_count = serializers.IntegerField(
        min_value=1, max_value=10_000, help_text="the new total number of partitions"
    )


# --- service accounts, keys ----------------------------------------------------------------


class ServiceAccountSerializer(serializers.ModelSerializer):
    principal = serializers.CharField(read_only=True)

    class Meta:
        model = ServiceAccount
        fields = ["name", "principal", "description", "created_at"]
        read_only_fields = ["principal", "created_at"]
        extra_kwargs = {"name": {"validators": []}}


class AclPresetSerializer(serializers.Serializer):
    preset = serializers.ChoiceField(
        choices=PRESET_CHOICES,
        help_text="producer: Write, Describe on the topics and IdempotentWrite on the cluster; "
        "consumer: Read, Describe on the topics and the groups; read-only: Read, Describe, "
        "DescribeConfigs on the topics and Describe on groups and the cluster; topic-admin: "
        "All on the topics; transactional-producer: the producer's rights and Write, Describe "
        "on the transactional ids; exactly-once: Read, Write, Describe on the topics, Read, "
        "Describe on the groups, Write, Describe on the transactional ids and IdempotentWrite "
        "on the cluster",
    )
    topic = serializers.CharField(max_length=255, help_text="a topic name, a prefix, or '*'")
    topic_pattern = serializers.ChoiceField(choices=PATTERNS, default=PatternType.LITERAL.value)
    group = serializers.CharField(
        max_length=255,
        required=False,
        allow_blank=True,
        help_text="consumer, exactly-once: a group or prefix",
    )
    group_pattern = serializers.ChoiceField(choices=PATTERNS, default=PatternType.PREFIXED.value)
    transactional_id = serializers.CharField(
        max_length=255,
        required=False,
        allow_blank=True,
        help_text="transactional-producer, exactly-once: the clients' transactional.id or prefix",
    )
    transactional_id_pattern = serializers.ChoiceField(
        choices=PATTERNS, default=PatternType.PREFIXED.value
    )


class ServiceAccountCreateSerializer(ServiceAccountSerializer):
    acl_preset = AclPresetSerializer(
        required=False, write_only=True, help_text="grant a usual set of ACLs in the same step"
    )

    class Meta(ServiceAccountSerializer.Meta):
        fields = [*ServiceAccountSerializer.Meta.fields, "acl_preset"]


class ServiceAccountUpdateSerializer(serializers.Serializer):
    description = serializers.CharField(allow_blank=True, max_length=2000)


class ApiKeySerializer(serializers.ModelSerializer):
    service_account = serializers.CharField(source="service_account.name", read_only=True)
    state = serializers.CharField(read_only=True)
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "key_id",
            "service_account",
            "description",
            "state",
            "created_at",
            "created_by",
            "last_used_at",
            "expires_at",
            "revoked_at",
        ]
        read_only_fields = fields

    def get_created_by(self, key: ApiKey) -> str | None:
        return key.created_by.get_username() if key.created_by else None


class ApiKeyCreateSerializer(serializers.Serializer):
    service_account = serializers.CharField(help_text="name of the service account")
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ApiKeyCreatedSerializer(ApiKeySerializer):
    secret = serializers.CharField(
        read_only=True, help_text="shown only in this response; store it now"
    )

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "secret"]
        read_only_fields = fields


# --- ACLs -----------------------------------------------------------------------------------


class AclSerializer(serializers.ModelSerializer):
    principal = serializers.CharField(read_only=True)

    class Meta:
        model = Acl
        fields = [
            "id",
            "principal",
            "resource_type",
            "pattern_type",
            "resource_name",
            "operation",
            "permission",
            "host",
            "created_at",
        ]
        read_only_fields = fields


class AclCreateSerializer(serializers.Serializer):
    principal = serializers.CharField(help_text="'User:<service account name>' or 'User:*'")
    resource_type = serializers.ChoiceField(choices=[t.value for t in ResourceType])
    pattern_type = serializers.ChoiceField(choices=PATTERNS, default=PatternType.LITERAL.value)
    resource_name = serializers.CharField(max_length=255)
    operation = serializers.ChoiceField(choices=[o.value for o in Operation])
    permission = serializers.ChoiceField(
        choices=[p.value for p in Permission], default=Permission.ALLOW.value
    )
    host = serializers.IPAddressField(required=False, help_text="'*' (default) or one IP")

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and data.get("host") == "*":
            data = {k: v for k, v in data.items() if k != "host"}
        return super().to_internal_value(data)


class ServiceAccountCreatedSerializer(ServiceAccountSerializer):
    acls = serializers.SerializerMethodField()

    class Meta(ServiceAccountSerializer.Meta):
        fields = [*ServiceAccountSerializer.Meta.fields, "acls"]

    @extend_schema_field(AclSerializer(many=True))
    def get_acls(self, sa: ServiceAccount) -> Any:  # the view fills it in
        return []


# --- consumer groups ----------------------------------------------------------------------


class GroupAssignmentSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partitions = serializers.ListField(child=serializers.IntegerField())


class GroupMemberSerializer(serializers.Serializer):
    member_id = serializers.CharField()
    group_instance_id = serializers.CharField(allow_null=True)
    client_id = serializers.CharField()
    host = serializers.CharField()
    subscription = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="topics the member subscribed to (null unless the protocol type is consumer)",
    )
    assignment = GroupAssignmentSerializer(
        many=True,
        allow_null=True,
        help_text="partitions the member holds (classic: as the group leader assigned them)",
    )
    subscription_regex = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="consumer groups: the regular expression the member subscribed with",
    )
    member_epoch = serializers.IntegerField(
        required=False, help_text="consumer groups (KIP-848): the member's epoch"
    )
    target_assignment = GroupAssignmentSerializer(
        many=True,
        required=False,
        help_text="consumer groups: what the coordinator's assignor gives the member; it "
        "differs from the assignment while partitions move",
    )


class GroupSummarySerializer(serializers.Serializer):
    group_id = serializers.CharField()
    state = serializers.CharField()
    group_type = serializers.ChoiceField(
        choices=["classic", "consumer"],
        help_text="the rebalance protocol: classic (JoinGroup/SyncGroup) or consumer (KIP-848)",
    )
    protocol_type = serializers.CharField()
    protocol = serializers.CharField(
        help_text="the assignor: agreed by the members (classic) or the coordinator's (consumer)"
    )
    generation = serializers.IntegerField(help_text="the generation; a consumer group's epoch")
    assignment_epoch = serializers.IntegerField(
        allow_null=True,
        help_text="consumer groups: the group epoch of the target assignment (null: classic)",
    )
    member_count = serializers.IntegerField()
    state_changed_at = serializers.DateTimeField()
    partition_count = serializers.IntegerField()
    total_lag = serializers.IntegerField(
        allow_null=True,
        help_text="records, all partitions (assigned ones without a commit from the log start)",
    )
    uncommitted_partition_count = serializers.IntegerField(
        help_text="assigned partitions without a committed offset, whose lag counts from the "
        "log start"
    )
    max_lag_seconds = serializers.FloatField(
        allow_null=True, help_text="age of the oldest record the group has yet to read"
    )
    offsets_error = serializers.CharField(
        allow_null=True, help_text="why log offsets are missing (brokers unreachable), or null"
    )


class GroupOffsetSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    committed_offset = serializers.IntegerField(allow_null=True)
    committed_at = serializers.DateTimeField(allow_null=True)
    metadata = serializers.CharField(allow_null=True)
    log_start_offset = serializers.IntegerField(allow_null=True)
    log_end_offset = serializers.IntegerField(allow_null=True)
    lag = serializers.IntegerField(
        allow_null=True,
        help_text="log end - committed offset (or - log start, see lag_basis), records",
    )
    lag_seconds = serializers.FloatField(
        allow_null=True, help_text="now - timestamp of the next record the group will read"
    )
    lag_basis = serializers.ChoiceField(
        choices=["committed", "log_start"],
        allow_null=True,
        help_text="what lag counts from: the committed offset, or the log start for a "
        "partition assigned to a member that has not committed yet",
    )
    member_id = serializers.CharField(allow_null=True)
    client_id = serializers.CharField(allow_null=True)
    host = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_null=True)


class GroupDetailSerializer(GroupSummarySerializer):
    members = GroupMemberSerializer(many=True)
    offsets = GroupOffsetSerializer(many=True)


class ResetTopicSerializer(serializers.Serializer):
    topic = serializers.CharField(max_length=249)
    partitions = serializers.ListField(
        child=serializers.IntegerField(min_value=0),
        required=False,
        max_length=10_000,
        help_text="default: every partition of the topic",
    )


class ResetOffsetsSerializer(serializers.Serializer):
    to = serializers.ChoiceField(choices=["earliest", "latest", "timestamp", "offset"])
    topics = ResetTopicSerializer(
        many=True,
        required=False,
        help_text="default: every partition the group has committed offsets for",
    )
    timestamp = serializers.DateTimeField(
        required=False, help_text="with to=timestamp: the first record at or after it"
    )
    offset = serializers.IntegerField(
        required=False, min_value=0, help_text="with to=offset (clamped into the log's range)"
    )
    dry_run = serializers.BooleanField(default=False, help_text="preview without changing")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        to = attrs["to"]
        if to == "timestamp" and "timestamp" not in attrs:
            raise serializers.ValidationError({"timestamp": ["required when to is timestamp"]})
        if to == "offset" and "offset" not in attrs:
            raise serializers.ValidationError({"offset": ["required when to is offset"]})
        return attrs


class ResetPlanEntrySerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    previous_offset = serializers.IntegerField(allow_null=True)
    new_offset = serializers.IntegerField()
    log_start_offset = serializers.IntegerField()
    log_end_offset = serializers.IntegerField()


class ResetOffsetsResultSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    offsets = ResetPlanEntrySerializer(many=True)


class LagSampleSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    topic = serializers.CharField(source="topic.name")
    partition = serializers.IntegerField()
    committed_offset = serializers.IntegerField(allow_null=True)
    log_end_offset = serializers.IntegerField()
    lag = serializers.IntegerField()
    lag_seconds = serializers.FloatField(allow_null=True)
    lag_basis = serializers.ChoiceField(choices=["committed", "log_start"])


# --- audit, brokers, auth ----------------------------------------------------------------


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor_type",
            "actor",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
            "source_ip",
        ]
        read_only_fields = fields


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)
    otp = serializers.CharField(
        max_length=64,
        required=False,
        help_text="for an account with two-factor sign-in: the app's code or a recovery code",
    )


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_staff = serializers.BooleanField()
    api_key = serializers.CharField(allow_null=True)
    tenants = serializers.ListField(child=serializers.DictField())


class ClientVersionSerializer(serializers.ModelSerializer):
    """Requests one client identity (principal, client id, and the software it named in
    ApiVersions v3+, empty before) sent at one API version, over every broker. ``served``
    false: the broker answered UNSUPPORTED_VERSION; ``kafka4_refuses``: served here, but
    Kafka 4 refuses that version (KIP-896)."""

    api = serializers.SerializerMethodField()
    kafka4_refuses = serializers.SerializerMethodField()

    class Meta:
        model = ClientVersion
        fields = [
            "principal",
            "client_id",
            "software_name",
            "software_version",
            "api_key",
            "api",
            "api_version",
            "served",
            "kafka4_refuses",
            "requests",
            "first_seen",
            "last_seen",
        ]
        read_only_fields = fields

    def get_api(self, obj: ClientVersion) -> str:
        return api_name(obj.api_key)

    def get_kafka4_refuses(self, obj: ClientVersion) -> bool:
        return obj.served and obj.api_version < KAFKA4_MIN_VERSION.get(obj.api_key, 0)


class ClientQuotaSerializer(serializers.ModelSerializer):
    """One quota value; ``user`` / ``client_id`` are null when the entity does not name
    that type and ``<default>`` for its default entity (as kafka-configs prints them)."""

    user = serializers.SerializerMethodField()
    client_id = serializers.SerializerMethodField()

    class Meta:
        model = ClientQuota
        fields = ["user", "client_id", "key", "value"]
        read_only_fields = fields

    def get_user(self, obj: ClientQuota) -> str | None:
        return obj.user or None

    def get_client_id(self, obj: ClientQuota) -> str | None:
        return obj.client_id or None
