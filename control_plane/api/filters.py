"""Query filters for list endpoints (``?name=``, ``?search=``, ``?since=`` ...)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from control_plane.access.models import Acl, ApiKey
from control_plane.audit.models import AuditEvent
from control_plane.catalog.models import Topic
from control_plane.groups.models import ConsumerGroup, LagSample
from data_plane.acl import WILDCARD_PRINCIPAL, Operation, PatternType, Permission, ResourceType


class TopicFilter(django_filters.FilterSet):
    search = django_filters.CharFilter(field_name="name", lookup_expr="icontains")

    class Meta:
        model = Topic
        fields = ["name"]


class ApiKeyFilter(django_filters.FilterSet):
    service_account = django_filters.CharFilter(field_name="service_account__name")
    state = django_filters.ChoiceFilter(
        choices=[("active", "active"), ("revoked", "revoked"), ("expired", "expired")],
        method="filter_state",
    )

    class Meta:
        model = ApiKey
        fields = ["service_account", "state"]

    def filter_state(self, queryset: QuerySet[ApiKey], name: str, value: str) -> QuerySet[ApiKey]:
        now = timezone.now()
        if value == "active":
            return queryset.filter(revoked_at__isnull=True).filter(
                Q(expires_at__isnull=True) | Q(expires_at__gt=now)
            )
        if value == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)


class AclFilter(django_filters.FilterSet):
    principal = django_filters.CharFilter(method="filter_principal")
    resource_type = django_filters.ChoiceFilter(choices=[(t.value, t.value) for t in ResourceType])
    pattern_type = django_filters.ChoiceFilter(choices=[(p.value, p.value) for p in PatternType])
    operation = django_filters.ChoiceFilter(choices=[(o.value, o.value) for o in Operation])
    permission = django_filters.ChoiceFilter(choices=[(p.value, p.value) for p in Permission])

    class Meta:
        model = Acl
        fields = ["resource_type", "pattern_type", "resource_name", "operation", "permission"]

    def filter_principal(self, queryset: QuerySet[Acl], name: str, value: str) -> QuerySet[Acl]:
        if value == WILDCARD_PRINCIPAL:
            return queryset.filter(service_account__isnull=True)
        return queryset.filter(service_account__name=value.removeprefix("User:"))


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """ISO 8601 with any offset, compared in UTC (Postgres rejects offsets past ±15:59)."""

    def filter(self, qs: QuerySet[Any], value: datetime | None) -> QuerySet[Any]:
        if value is not None:
            try:
                value = value.astimezone(UTC)
            except OverflowError:
                raise ValidationError({self.field_name: ["date is out of range"]}) from None
        return super().filter(qs, value)


class AuditEventFilter(django_filters.FilterSet):
    since = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")
    action = django_filters.CharFilter()
    action_prefix = django_filters.CharFilter(field_name="action", lookup_expr="startswith")

    class Meta:
        model = AuditEvent
        fields = ["action", "actor", "actor_type", "object_type", "object_id"]


class ConsumerGroupFilter(django_filters.FilterSet):
    search = django_filters.CharFilter(field_name="group_id", lookup_expr="icontains")

    class Meta:
        model = ConsumerGroup
        fields = ["state"]


class LagSampleFilter(django_filters.FilterSet):
    since = UtcDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="at", lookup_expr="lt")
    topic = django_filters.CharFilter(field_name="topic__name")

    class Meta:
        model = LagSample
        fields = ["partition"]
