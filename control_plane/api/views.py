"""Admin REST API views. Thin: parse, authorize (base viewset), call a service, render."""

from __future__ import annotations

import json
from datetime import UTC, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate, login, logout
from django.db.models import Sum
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, permissions, renderers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.access import policy, presets
from control_plane.access import services as access_services
from control_plane.access.caller import request_actor
from control_plane.access.models import Acl, ApiKey, ServiceAccount
from control_plane.accounts import services as accounts
from control_plane.accounts import tokens_api, two_factor
from control_plane.accounts.models import Invitation, PersonalToken
from control_plane.alerts import services as alert_services
from control_plane.alerts.models import AlertRule, Delivery
from control_plane.api import serializers as s
from control_plane.api.authentication import Throttled
from control_plane.api.base import TenantScopedViewSet
from control_plane.api.filters import (
    AclFilter,
    ApiKeyFilter,
    AuditEventFilter,
    ConsumerGroupFilter,
    LagSampleFilter,
    TopicFilter,
)
from control_plane.audit.models import AuditEvent
from control_plane.catalog import services as catalog_services
from control_plane.catalog.models import ClientVersion, Topic
from control_plane.core import ratelimit
from control_plane.core.actor import Actor
from control_plane.core.errors import InvalidInput
from control_plane.core.http import client_ip
from control_plane.groups import lag as group_lag
from control_plane.groups import services as group_services
from control_plane.groups.models import ConsumerGroup, LagSample
from control_plane.lifecycle import services as lifecycle
from control_plane.lifecycle.models import TenantDeletion
from control_plane.tenancy import plans
from control_plane.tenancy import services as tenancy_services
from control_plane.tenancy.models import ClientQuota, Membership, Role, Tenant
from control_plane.usage import services as usage_services
from data_plane.acl import CLUSTER_RESOURCE_NAME, Operation, ResourceType

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
LAG_HISTORY_LIMIT = 50_000

TENANT_PARAM = OpenApiParameter(
    "tenant_slug", str, OpenApiParameter.PATH, description="tenant slug"
)


def tenant_scoped(viewset: type) -> type:
    """Document the ``tenant_slug`` path parameter on every action of a viewset."""
    return extend_schema(parameters=[TENANT_PARAM])(viewset)


# --- tenants -----------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(responses=s.TenantSerializer(many=True)),
    retrieve=extend_schema(responses=s.TenantSerializer),
    create=extend_schema(request=s.TenantCreateSerializer, responses={201: s.TenantSerializer}),
    destroy=extend_schema(
        request=s.TenantDeleteSerializer,
        responses={202: s.TenantDeletionSerializer},
        description=(
            "Owners (and operators): cut the tenant off now (keys revoked, connections "
            "closed, members removed) and start the job that deletes its topics, groups, "
            "connectors and data; follow it at the returned deletion. `confirm` (in the "
            "body or the query) must be the tenant's slug."
        ),
    ),
    partial_update=extend_schema(request=s.TenantUpdateSerializer, responses=s.TenantSerializer),
)
class TenantViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Tenants the caller belongs to (operators see all; an API key sees its own)."""

    serializer_class = s.TenantSerializer
    lookup_field = "slug"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        queryset = Tenant.objects.select_related("plan").annotate(
            partitions_in_use=Sum("topics__partition_count")
        )
        if getattr(self, "swagger_fake_view", False):
            return queryset.none()
        if isinstance(self.request.auth, ApiKey):
            return queryset.filter(pk=self.request.auth.tenant_id)
        if self.request.user.is_staff:
            return queryset
        return queryset.filter(memberships__user=self.request.user)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        user = self.request.user
        if not isinstance(self.request.auth, ApiKey) and user.is_authenticated:
            context["roles"] = dict(
                Membership.objects.filter(user=user).values_list("tenant_id", "role")
            )
        return context

    def create(self, request: Request) -> Response:
        serializer = s.TenantCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        actor = request_actor(request)
        if actor.api_key is not None:
            raise exceptions.PermissionDenied("API keys cannot create tenants")
        if not actor.is_staff:
            # A person's own tenant (Step 15): default limits, the caller as its owner.
            if data.pop("owner", None) is not None or set(data) - {"slug", "name"}:
                raise exceptions.PermissionDenied(
                    "only operators (staff) name another owner or set limits"
                )
            tenant = accounts.create_tenant(actor, slug=data["slug"], name=data["name"])
            return Response(self._render(tenant), status=status.HTTP_201_CREATED)
        owner_name = data.pop("owner", None)
        owner = tenancy_services.find_user(owner_name, field="owner") if owner_name else actor.user
        plan_slug = data.pop("plan", None)
        tenant = tenancy_services.create_tenant(
            actor,
            slug=data.pop("slug"),
            name=data.pop("name"),
            owner=owner,
            limits=data,
            plan=plans.find_plan(plan_slug) if plan_slug else None,
        )
        return Response(self._render(tenant), status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, slug: str) -> Response:
        tenant = self.get_object()
        serializer = s.TenantUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        actor = request_actor(request)
        if actor.api_key is not None:
            raise exceptions.PermissionDenied("API keys cannot change tenants")
        if not actor.is_staff and tenancy_services.role_of(actor.user, tenant) != Role.OWNER:
            raise exceptions.PermissionDenied("changing a tenant needs the owner role")
        name = data.pop("name", None)
        plan_slug = data.pop("plan", None)
        tenant = tenancy_services.update_tenant(
            actor,
            tenant,
            name=name,
            limits=data,
            plan=plans.find_plan(plan_slug) if plan_slug else None,
        )
        return Response(self._render(tenant))

    def destroy(self, request: Request, slug: str) -> Response:
        tenant = self.get_object()
        data = request.data if request.data else request.query_params
        serializer = s.TenantDeleteSerializer(data={"confirm": data.get("confirm", "")})
        serializer.is_valid(raise_exception=True)
        deletion = lifecycle.request_deletion(
            request_actor(request), tenant, confirm=serializer.validated_data["confirm"]
        )
        return Response(
            s.TenantDeletionSerializer(deletion).data,
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": f"/api/v1/tenant-deletions/{deletion.pk}/"},
        )

    @extend_schema(request=s.TenantSuspendSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def suspend(self, request: Request, slug: str) -> Response:
        """Operators: refuse the tenant's produce and new connections (reads on open
        connections go on for the grace period); nothing is deleted."""
        tenant = self.get_object()
        serializer = s.TenantSuspendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        tenant = tenancy_services.suspend_tenant(
            request_actor(request), tenant, **serializer.validated_data
        )
        return Response(self._render(tenant))

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, slug: str) -> Response:
        """Operators: undo a suspension."""
        tenant = tenancy_services.resume_tenant(request_actor(request), self.get_object())
        return Response(self._render(tenant))

    @extend_schema(
        request=None,
        responses={204: None},
        description="The caller stops being a member (the only owner must transfer first).",
    )
    @action(detail=True, methods=["post"])
    def leave(self, request: Request, slug: str) -> Response:
        actor = request_actor(request)
        if actor.api_key is not None:
            raise exceptions.PermissionDenied("API keys cannot leave tenants")
        tenant = Membership.objects.filter(user=request.user, tenant__slug=slug).first()
        if tenant is None:
            raise exceptions.NotFound(f"tenant {slug!r} not found")
        tenancy_services.leave(actor, tenant.tenant)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _render(self, tenant: Tenant) -> dict[str, Any]:
        tenant = Tenant.objects.annotate(partitions_in_use=Sum("topics__partition_count")).get(
            pk=tenant.pk
        )
        return s.TenantSerializer(tenant, context=self.get_serializer_context()).data


class PlanViewSet(viewsets.ModelViewSet):
    """Plans: named limits operators define and assign to tenants (docs/accounts.md).
    Anyone signed in reads them; operators (staff) create, change and delete them."""

    serializer_class = s.TenantPlanSerializer
    lookup_field = "slug"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        return plans.plans_with_counts()

    def _limits(self, data: dict[str, Any]) -> dict[str, Any]:
        return {k: data[k] for k in tenancy_services.PLAN_LIMITS if k in data}

    def create(self, request: Request) -> Response:
        serializer = s.TenantPlanSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        plan = plans.create_plan(
            request_actor(request),
            slug=data["slug"],
            name=data["name"],
            description=data.get("description", ""),
            is_default=data.get("is_default", False),
            limits=self._limits(data),
        )
        return Response(self._render(plan), status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, slug: str) -> Response:
        plan = self.get_object()
        serializer = s.TenantPlanSerializer(plan, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if "slug" in data and data["slug"] != plan.slug:
            raise InvalidInput("a plan's slug does not change", field="slug")
        plan = plans.update_plan(
            request_actor(request),
            plan,
            name=data.get("name"),
            description=data.get("description"),
            is_default=data.get("is_default"),
            limits=self._limits(data),
        )
        return Response(self._render(plan))

    def destroy(self, request: Request, slug: str) -> Response:
        plans.delete_plan(request_actor(request), self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _render(self, plan: Any) -> dict[str, Any]:
        return s.TenantPlanSerializer(plans.plans_with_counts().get(pk=plan.pk)).data


@extend_schema_view(
    list=extend_schema(responses=s.TenantDeletionSerializer(many=True)),
    retrieve=extend_schema(responses=s.TenantDeletionSerializer),
)
class TenantDeletionViewSet(viewsets.ReadOnlyModelViewSet):
    """Tenant deletions the caller asked for (operators see all), with their progress;
    kept after the tenant is gone."""

    serializer_class = s.TenantDeletionSerializer

    def get_queryset(self) -> Any:
        queryset = TenantDeletion.objects.all()
        if getattr(self, "swagger_fake_view", False):
            return queryset.none()
        if isinstance(self.request.auth, ApiKey):
            return queryset.none()
        if self.request.user.is_staff:
            return queryset
        return queryset.filter(requested_by=self.request.user)


# --- members ------------------------------------------------------------------------------


@tenant_scoped
@extend_schema_view(
    create=extend_schema(
        request=s.MembershipCreateSerializer,
        responses={201: s.MembershipSerializer, 202: s.DetailSerializer},
        description=(
            "Operators get 201 with the membership, or a 400 naming an unknown account. "
            "Tenant admins get 202 with the same message whether or not the account exists "
            "or is already a member, so the answer does not tell which accounts exist."
        ),
    ),
    partial_update=extend_schema(
        request=s.MembershipUpdateSerializer, responses=s.MembershipSerializer
    ),
)
class MembershipViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """People in the tenant and their roles. Admins manage members; owners manage owners."""

    lookup_value_regex = r"[0-9]+"
    queryset = Membership.objects.select_related("user")
    serializer_class = s.MembershipSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    needs = policy.MEMBERSHIP_NEEDS

    def create(self, request: Request, tenant_slug: str) -> Response:
        serializer = s.MembershipCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        role = serializer.validated_data["role"]
        if self.actor.is_staff:  # operators see every account anyway: precise answers
            user = tenancy_services.find_user(serializer.validated_data["username"])
            membership = tenancy_services.add_member(
                self.actor, self.access.tenant, user=user, role=role
            )
            return Response(
                s.MembershipSerializer(membership, context={"request": request}).data,
                status=status.HTTP_201_CREATED,
            )
        # Tenant admins get one answer whether or not the account exists (no enumeration).
        try:
            user = tenancy_services.find_user(serializer.validated_data["username"])
        except InvalidInput:
            user = None
        if user is not None and not accounts.is_verified(user):
            user = None  # an address nobody proved is no one's yet
        tenancy_services.add_member_quietly(self.actor, self.access.tenant, user=user, role=role)
        return Response(
            {"detail": tenancy_services.NEUTRAL_ADD_MESSAGE}, status=status.HTTP_202_ACCEPTED
        )

    def partial_update(self, request: Request, tenant_slug: str, pk: str) -> Response:
        membership = self.get_object()
        serializer = s.MembershipUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership = tenancy_services.change_member_role(
            self.actor, membership, role=serializer.validated_data["role"]
        )
        return Response(s.MembershipSerializer(membership, context={"request": request}).data)

    def destroy(self, request: Request, tenant_slug: str, pk: str) -> Response:
        tenancy_services.remove_member(self.actor, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=None,
        responses=s.MembershipSerializer,
        description="The member becomes an owner and the calling owner an admin.",
    )
    @action(detail=True, methods=["post"], url_path="transfer-ownership")
    def transfer_ownership(self, request: Request, tenant_slug: str, pk: str) -> Response:
        membership = tenancy_services.transfer_ownership(
            self.actor, self.access.tenant, to=self.get_object()
        )
        return Response(s.MembershipSerializer(membership, context={"request": request}).data)


# --- invitations --------------------------------------------------------------------------


@tenant_scoped
@extend_schema_view(
    create=extend_schema(
        request=s.InvitationCreateSerializer, responses={201: s.InvitationSerializer}
    ),
    destroy=extend_schema(
        responses={200: s.InvitationSerializer},
        description="Withdraws the invitation (its link stops working); the record stays.",
    ),
)
class InvitationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Invitations by e-mail to join the tenant with a role: admins invite up to admin,
    owners any role. The link goes only to the address; the API never shows it."""

    lookup_value_regex = r"[0-9]+"
    queryset = Invitation.objects.select_related("invited_by")
    serializer_class = s.InvitationSerializer
    http_method_names = ["get", "post", "delete", "head", "options"]
    needs = policy.INVITATION_NEEDS

    def create(self, request: Request, tenant_slug: str) -> Response:
        serializer = s.InvitationCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        invited = accounts.invite(
            self.actor,
            self.access.tenant,
            email=serializer.validated_data["email"],
            role=serializer.validated_data["role"],
            base_url=settings.MILLRACE_PUBLIC_URL or request.build_absolute_uri("/"),
        )
        return Response(
            s.InvitationSerializer(invited.invitation).data, status=status.HTTP_201_CREATED
        )

    def destroy(self, request: Request, tenant_slug: str, pk: str) -> Response:
        invitation = accounts.revoke_invitation(self.actor, self.get_object())
        return Response(s.InvitationSerializer(invitation).data)


class _SessionPersonView(APIView):
    permission_classes = [permissions.IsAuthenticated]

    def _person(self, request: Request) -> Actor:
        actor = request_actor(request)
        if actor.api_key is not None or isinstance(request.auth, PersonalToken):
            raise exceptions.PermissionDenied(
                "personal tokens are made and revoked from a signed-in session"
            )
        return actor


class PersonalTokensView(_SessionPersonView):
    """The signed-in person's personal API tokens (made and revoked from a session)."""

    @extend_schema(responses=s.PersonalTokenSerializer(many=True))
    def get(self, request: Request) -> Response:
        self._person(request)
        rows = PersonalToken.objects.filter(user=request.user)
        return Response(s.PersonalTokenSerializer(rows, many=True).data)

    @extend_schema(
        request=s.PersonalTokenCreateSerializer, responses={201: s.PersonalTokenCreatedSerializer}
    )
    def post(self, request: Request) -> Response:
        actor = self._person(request)
        serializer = s.PersonalTokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        created = tokens_api.create(
            actor,
            name=serializer.validated_data["name"],
            expires_in_days=serializer.validated_data.get("expires_in_days"),
        )
        body = {**s.PersonalTokenSerializer(created.token).data, "token": created.text}
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response


class PersonalTokenView(_SessionPersonView):
    """Revoke one of the signed-in person's tokens."""

    @extend_schema(request=None, responses=s.PersonalTokenSerializer)
    def delete(self, request: Request, token_id: str) -> Response:
        actor = self._person(request)
        token = PersonalToken.objects.filter(user=request.user, token_id=token_id).first()
        if token is None:
            raise exceptions.NotFound("no such token")
        return Response(s.PersonalTokenSerializer(tokens_api.revoke(actor, token)).data)


class InvitationAcceptView(APIView):
    """The signed-in person accepts an invitation mailed to their proven address."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(request=s.InvitationAcceptSerializer, responses={201: s.MembershipSerializer})
    def post(self, request: Request) -> Response:
        actor = request_actor(request)
        if actor.api_key is not None:
            raise exceptions.PermissionDenied("API keys cannot accept invitations")
        serializer = s.InvitationAcceptSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        membership = accounts.accept_invitation(actor, serializer.validated_data["token"])
        return Response(
            s.MembershipSerializer(membership, context={"request": request}).data,
            status=status.HTTP_201_CREATED,
        )


# --- topics -------------------------------------------------------------------------------


@extend_schema_view(
    create=extend_schema(request=s.TopicCreateSerializer, responses={201: s.TopicSerializer}),
)
@tenant_scoped
class TopicViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Topics of the tenant. API keys see and change only topics their ACLs cover."""

    queryset = Topic.objects.all()
    serializer_class = s.TopicSerializer
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    filterset_class = TopicFilter
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    needs = policy.TOPIC_NEEDS

    def filter_queryset(self, queryset: Any) -> Any:
        queryset = super().filter_queryset(queryset)
        if self.action == "list" and self.access.api_key is not None:
            names = list(queryset.values_list("name", flat=True))
            visible = [n for n in names if self.access.key_may(Operation.DESCRIBE, TOPIC, n)]
            queryset = queryset.filter(name__in=visible)
        return queryset

    def create(self, request: Request, tenant_slug: str) -> Response:
        serializer = s.TopicCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if self.access.api_key is not None and not (
            self.access.key_may(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)
            or self.access.key_may(Operation.CREATE, TOPIC, data["name"])
        ):
            raise exceptions.PermissionDenied(
                f"{self.access.api_key.service_account.principal} is not authorized to "
                f"create topic {data['name']!r}"
            )
        topic = catalog_services.create_topic(
            self.actor,
            self.access.tenant,
            name=data["name"],
            partition_count=data["partition_count"],
            replication_factor=data.get("replication_factor"),
            configs=data.get("configs", {}),
        )
        return Response(s.TopicSerializer(topic).data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, tenant_slug: str, name: str) -> Response:
        catalog_services.delete_topic(self.actor, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=s.TopicConfigEntrySerializer(many=True))
    @action(detail=True, methods=["get"])
    def configs(self, request: Request, tenant_slug: str, name: str) -> Response:
        return Response(s.topic_config_entries(self.get_object()))

    @extend_schema(
        request={
            "application/json": {
                "type": "object",
                "additionalProperties": {
                    "oneOf": [{"type": "integer"}, {"type": "boolean"}, {"type": "string"}],
                    "nullable": True,
                },
            }
        },
        responses=s.TopicConfigEntrySerializer(many=True),
        description="Incremental alter: a value sets the config, null resets it to the default.",
    )
    @configs.mapping.patch
    def alter_configs(self, request: Request, tenant_slug: str, name: str) -> Response:
        field = s.ConfigMapField()
        try:
            changes = field.run_validation(request.data)
        except exceptions.ValidationError as exc:
            raise exceptions.ValidationError({"configs": exc.detail}) from None
        topic = catalog_services.alter_topic_configs(self.actor, self.get_object(), changes)
        return Response(s.topic_config_entries(topic))

    @extend_schema(responses=s.PartitionSerializer(many=True))
    @action(detail=True, methods=["get"])
    def partitions(self, request: Request, tenant_slug: str, name: str) -> Response:
        topic = self.get_object()
        return Response(s.PartitionSerializer(topic.partitions.all(), many=True).data)

    @extend_schema(request=s.AddPartitionsSerializer, responses=s.TopicSerializer)
    @partitions.mapping.post
    def add_partitions(self, request: Request, tenant_slug: str, name: str) -> Response:
        serializer = s.AddPartitionsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        topic = catalog_services.add_partitions(
            self.actor,
            self.get_object(),
            partition_count=serializer.validated_data["partition_count"],
        )
        return Response(s.TopicSerializer(topic).data)


# --- consumer groups ----------------------------------------------------------------------


@tenant_scoped
@extend_schema_view(
    list=extend_schema(responses=s.GroupSummarySerializer(many=True)),
    retrieve=extend_schema(responses=s.GroupDetailSerializer),
    destroy=extend_schema(
        description="Delete an empty group and its committed offsets (409 while it has members)."
    ),
)
class ConsumerGroupViewSet(TenantScopedViewSet):
    """Consumer groups: state, members, assignments, committed offsets and lag.

    API keys need Describe on a group to see it and only see the offsets of topics they
    may Describe (as Kafka's DescribeGroups/OffsetFetch); resetting offsets needs Read on
    the group and on every topic reset (Kafka's AlterConsumerGroupOffsets), deleting
    needs Delete on the group.
    """

    queryset = ConsumerGroup.objects.all()
    serializer_class = s.GroupSummarySerializer
    lookup_field = "group_id"
    lookup_value_regex = r"[^/]+"
    filterset_class = ConsumerGroupFilter
    http_method_names = ["get", "post", "delete", "head", "options"]
    needs = policy.GROUP_NEEDS

    def _visible_topic(self, topic: str) -> bool:
        return self.access.api_key is None or self.access.key_may(Operation.DESCRIBE, TOPIC, topic)

    def list(self, request: Request, tenant_slug: str) -> Response:
        groups = list(self.filter_queryset(self.get_queryset()))
        if self.access.api_key is not None:
            groups = [
                g for g in groups if self.access.key_may(Operation.DESCRIBE, GROUP, g.group_id)
            ]
        page = self.paginate_queryset(groups)
        rows = group_lag.summaries(self.access.tenant, page, visible=self._visible_topic)
        return self.get_paginated_response(s.GroupSummarySerializer(rows, many=True).data)

    def retrieve(self, request: Request, tenant_slug: str, group_id: str) -> Response:
        detail = group_lag.describe(
            self.access.tenant, self.get_object(), visible=self._visible_topic
        )
        return Response(s.GroupDetailSerializer(detail).data)

    def destroy(self, request: Request, tenant_slug: str, group_id: str) -> Response:
        group_services.delete_group(self.actor, self.access.tenant, self.get_object().group_id)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=s.ResetOffsetsSerializer,
        responses=s.ResetOffsetsResultSerializer,
        description=(
            "Move the group's committed offsets to earliest, latest, a timestamp or an "
            "offset. Refused with 409 while the group has members; dry_run previews."
        ),
    )
    @action(detail=True, methods=["post"], url_path="reset-offsets")
    def reset_offsets(self, request: Request, tenant_slug: str, group_id: str) -> Response:
        serializer = s.ResetOffsetsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        group = self.get_object()
        group_services.ensure_inactive(group, "reset offsets of")
        stamp = data.get("timestamp")
        plan = group_lag.plan_reset(
            self.access.tenant,
            group,
            to=data["to"],
            topics=data.get("topics"),
            timestamp_ms=None if stamp is None else int(stamp.timestamp() * 1000),
            offset=data.get("offset"),
        )
        if self.access.api_key is not None:
            for topic in sorted({row["topic"] for row in plan}):
                if not self.access.key_may(Operation.READ, TOPIC, topic):
                    raise exceptions.PermissionDenied(
                        f"{self.access.api_key.service_account.principal} is not authorized "
                        f"to read topic {topic!r}"
                    )
        if not data["dry_run"]:
            group_services.reset_offsets(
                self.actor,
                self.access.tenant,
                group.group_id,
                {(row["topic"], row["partition"]): row["new_offset"] for row in plan},
            )
        return Response({"dry_run": data["dry_run"], "offsets": plan})

    @extend_schema(
        responses=s.LagSampleSerializer(many=True),
        parameters=[
            OpenApiParameter("since", str, description="ISO 8601; default one hour ago"),
            OpenApiParameter("until", str, description="ISO 8601"),
            OpenApiParameter("topic", str),
            OpenApiParameter("partition", int),
        ],
        description="Lag samples (every MILLRACE_LAG_SAMPLE_SECONDS, oldest first).",
    )
    @action(detail=True, methods=["get"], url_path="lag-history", pagination_class=None)
    def lag_history(self, request: Request, tenant_slug: str, group_id: str) -> Response:
        group = self.get_object()
        samples = LagSample.objects.filter(group=group).select_related("topic").order_by("at")
        if "since" not in request.query_params:
            samples = samples.filter(at__gte=timezone.now() - timedelta(hours=1))
        samples = LagSampleFilter(request.query_params, queryset=samples, request=request).qs
        rows = [x for x in samples[:LAG_HISTORY_LIMIT] if self._visible_topic(x.topic.name)]
        return Response(s.LagSampleSerializer(rows, many=True).data)


# --- service accounts and API keys ----------------------------------------------------------


@tenant_scoped
@extend_schema_view(
    create=extend_schema(
        request=s.ServiceAccountCreateSerializer,
        responses={201: s.ServiceAccountCreatedSerializer},
        description="Create a service account; `acl_preset` also grants a usual set of ACLs "
        "(ordinary ACLs, listed in `acls`), all in one step: nothing is created if any fails.",
    ),
    partial_update=extend_schema(
        request=s.ServiceAccountUpdateSerializer, responses=s.ServiceAccountSerializer
    ),
)
class ServiceAccountViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Service accounts: the principals that API keys authenticate as."""

    queryset = ServiceAccount.objects.all()
    serializer_class = s.ServiceAccountSerializer
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    needs = policy.SERVICE_ACCOUNT_NEEDS

    def create(self, request: Request, tenant_slug: str) -> Response:
        serializer = s.ServiceAccountCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        preset = presets.parse(data["acl_preset"]) if "acl_preset" in data else None
        sa, acls = presets.create_with_preset(
            self.actor,
            self.access.tenant,
            name=data["name"],
            description=data.get("description", ""),
            preset=preset,
        )
        body = {
            **s.ServiceAccountSerializer(sa).data,
            "acls": s.AclSerializer(acls, many=True).data,
        }
        return Response(body, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, tenant_slug: str, name: str) -> Response:
        serializer = s.ServiceAccountUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        sa = access_services.update_service_account(
            self.actor, self.get_object(), description=serializer.validated_data["description"]
        )
        return Response(s.ServiceAccountSerializer(sa).data)

    def destroy(self, request: Request, tenant_slug: str, name: str) -> Response:
        access_services.delete_service_account(self.actor, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


@tenant_scoped
@extend_schema_view(
    create=extend_schema(
        request=s.ApiKeyCreateSerializer, responses={201: s.ApiKeyCreatedSerializer}
    ),
    destroy=extend_schema(
        description="Revoke the key. The row stays (state 'revoked') for the audit trail.",
        responses=s.ApiKeySerializer,
    ),
)
class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """API keys. The secret is in the create response only; DELETE revokes."""

    queryset = ApiKey.objects.select_related("service_account", "created_by")
    serializer_class = s.ApiKeySerializer
    lookup_field = "key_id"
    filterset_class = ApiKeyFilter
    http_method_names = ["get", "post", "delete", "head", "options"]
    needs = policy.API_KEY_NEEDS

    def create(self, request: Request, tenant_slug: str) -> Response:
        serializer = s.ApiKeyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        sa = ServiceAccount.objects.filter(
            tenant=self.access.tenant, name=data["service_account"]
        ).first()
        if sa is None:
            raise exceptions.ValidationError(
                {"service_account": [f"no service account named {data['service_account']!r}"]}
            )
        created = access_services.create_api_key(
            self.actor,
            sa,
            description=data.get("description", ""),
            expires_at=data.get("expires_at"),
        )
        body = s.ApiKeySerializer(created.api_key).data
        body["secret"] = created.secret
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response

    def destroy(self, request: Request, tenant_slug: str, key_id: str) -> Response:
        key = access_services.revoke_api_key(self.actor, self.get_object())
        return Response(s.ApiKeySerializer(key).data)


# --- ACLs ----------------------------------------------------------------------------------


@tenant_scoped
@extend_schema_view(
    create=extend_schema(request=s.AclCreateSerializer, responses={201: s.AclSerializer}),
)
class AclViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """ACL bindings in Kafka's model; deny wins, and no match means deny."""

    lookup_value_regex = r"[0-9]+"
    queryset = Acl.objects.select_related("service_account")
    serializer_class = s.AclSerializer
    filterset_class = AclFilter
    http_method_names = ["get", "post", "delete", "head", "options"]
    needs = policy.ACL_NEEDS

    def create(self, request: Request, tenant_slug: str) -> Response:
        serializer = s.AclCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        acl = access_services.create_acl(
            self.actor, self.access.tenant, **serializer.validated_data
        )
        return Response(s.AclSerializer(acl).data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, tenant_slug: str, pk: str) -> Response:
        access_services.delete_acl(self.actor, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- client quotas -------------------------------------------------------------------------


@tenant_scoped
class ClientQuotaViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """The tenant's client quotas (KIP-546), one row per entity and key; read-only: they
    are set with Kafka's AlterClientQuotas (docs/compatibility.md)."""

    queryset = ClientQuota.objects.all()
    serializer_class = s.ClientQuotaSerializer
    needs = policy.CLIENT_QUOTA_NEEDS


@tenant_scoped
class ClientVersionViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """Which client software, at which request versions, the tenant's connections use
    (reported by the brokers every minute), most recently seen first: who must upgrade.
    Read-only."""

    queryset = ClientVersion.objects.order_by("-last_seen", "api_key", "api_version")
    serializer_class = s.ClientVersionSerializer
    needs = policy.CLIENT_VERSION_NEEDS


# --- alerts --------------------------------------------------------------------------------


def _object(request: Request) -> dict[str, Any]:
    """The request's body as a dict (a form's single values); 400 for any other JSON."""
    data = request.data
    if hasattr(data, "dict"):
        return dict(data.dict())
    if not isinstance(data, dict):
        raise InvalidInput("the body must be a JSON object")
    return dict(data)


@tenant_scoped
@extend_schema_view(
    create=extend_schema(request=s.AlertRuleSerializer, responses={201: s.AlertRuleSerializer}),
    partial_update=extend_schema(request=s.AlertRuleSerializer, responses=s.AlertRuleSerializer),
)
class AlertRuleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """The tenant's alert rules (docs/alerts.md): consumer lag, usage of the plan, a failed
    connector or task, an API key about to expire; delivered by e-mail and signed
    webhooks. A new rule's ``webhook_secret`` is in the answer to its POST only."""

    lookup_value_regex = r"[0-9]+"
    queryset = AlertRule.objects.prefetch_related("states")
    serializer_class = s.AlertRuleSerializer
    needs = policy.ALERT_RULE_NEEDS
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def create(self, request: Request, tenant_slug: str) -> Response:
        created = alert_services.create_rule(self.actor, self.access.tenant, _object(request))
        return Response(
            s.AlertRuleSerializer(
                created.rule, context={"webhook_secret": created.webhook_secret}
            ).data,
            status=status.HTTP_201_CREATED,
        )

    def partial_update(self, request: Request, tenant_slug: str, pk: str) -> Response:
        rule = alert_services.update_rule(self.actor, self.get_object(), _object(request))
        return Response(s.AlertRuleSerializer(self.get_queryset().get(pk=rule.pk)).data)

    def destroy(self, request: Request, tenant_slug: str, pk: str) -> Response:
        alert_services.delete_rule(self.actor, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=s.DeliverySerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def deliveries(self, request: Request, tenant_slug: str, pk: str) -> Response:
        """The rule's last 100 deliveries, newest first: each firing and resolving, by
        each channel, with its attempts and the last error."""
        rule = self.get_object()
        rows = Delivery.objects.filter(notification__rule=rule).select_related("notification")
        return Response(s.DeliverySerializer(rows[:100], many=True).data)


# --- usage ---------------------------------------------------------------------------------


class CSVRenderer(renderers.BaseRenderer):
    """``?format=csv`` (or ``Accept: text/csv``): the view hands over the text."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        # An error answer (a dict) is sent as its JSON text.
        return data if isinstance(data, str) else json.dumps(data)


USAGE_PARAMS = [
    OpenApiParameter("start", str, description="ISO 8601 time; default: 24 hours before end"),
    OpenApiParameter("end", str, description="ISO 8601 time; default: now"),
    OpenApiParameter(
        "group_by",
        str,
        enum=usage_services.GROUPS,
        description="default: topic (operators: tenant)",
    ),
    OpenApiParameter("format", str, enum=["json", "csv"], description="csv: every hourly row"),
]


def _usage_answer(
    request: Request, tenants: list[Tenant] | None, default_group: str, allowed: tuple[str, ...]
) -> Response:
    start = _when(request.query_params.get("start"), "start")
    end = _when(request.query_params.get("end"), "end")
    start, end = usage_services.period(start, end)
    if end <= start:
        raise InvalidInput("end must be after start", field="end")
    if end - start > timedelta(days=400):
        raise InvalidInput("at most 400 days at a time", field="start")
    if request.accepted_renderer.format == "csv":
        tenant = tenants[0] if tenants else None
        text = usage_services.to_csv(usage_services.detail(tenant, start, end))
        name = f"usage-{tenant.slug if tenant else 'all'}-{start:%Y%m%dT%H}-{end:%Y%m%dT%H}.csv"
        return Response(text, headers={"Content-Disposition": f'attachment; filename="{name}"'})
    group_by = request.query_params.get("group_by", default_group)
    if group_by not in allowed:
        raise InvalidInput(f"one of {', '.join(allowed)}", field="group_by")
    rows = usage_services.usage(tenants, start, end, group_by)
    return Response(
        {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "group_by": group_by,
            "rows": rows,
            "totals": usage_services.totals(rows),
        }
    )


def _when(value: str | None, field: str) -> Any:
    if not value:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        raise InvalidInput("an ISO 8601 time, e.g. 2026-12-01T00:00:00Z", field=field)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@tenant_scoped
@extend_schema_view(list=extend_schema(parameters=USAGE_PARAMS, responses=OpenApiTypes.OBJECT))
class UsageViewSet(TenantScopedViewSet):
    """The tenant's metered usage per hour (docs/usage.md): by topic (bytes and records
    produced and fetched, storage GB-hours, partition-hours), by principal (chargeback per
    service account), or by hour; ``format=csv`` exports every hourly row."""

    needs = policy.USAGE_NEEDS
    pagination_class = None
    renderer_classes = [renderers.JSONRenderer, CSVRenderer]

    def list(self, request: Request, tenant_slug: str) -> Response:
        return _usage_answer(request, [self.access.tenant], "topic", ("topic", "principal", "hour"))


class ClusterUsageView(APIView):
    """Operators: every tenant's metered usage (``group_by`` tenant, topic, principal or
    hour), or every hourly row as CSV."""

    renderer_classes = [renderers.JSONRenderer, CSVRenderer]

    @extend_schema(parameters=USAGE_PARAMS, responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        if not request_actor(request).is_staff:
            raise exceptions.PermissionDenied("only operators (staff) see every tenant's usage")
        return _usage_answer(request, None, "tenant", usage_services.GROUPS)

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        """Sum the brokers' reports into hourly rows now (the beat does it every
        MILLRACE_USAGE_AGGREGATE_SECONDS)."""
        if not request_actor(request).is_staff:
            raise exceptions.PermissionDenied("only operators (staff) aggregate usage")
        run = usage_services.aggregate()
        return Response({"hours": run.hours, "rows": run.rows, "seconds": round(run.seconds, 3)})


# --- audit ---------------------------------------------------------------------------------


@tenant_scoped
class AuditEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Every change in the tenant: who, what, before/after, when, from where."""

    lookup_value_regex = r"[0-9]+"
    queryset = AuditEvent.objects.all()
    serializer_class = s.AuditEventSerializer
    filterset_class = AuditEventFilter
    needs = policy.AUDIT_NEEDS


# --- session auth ---------------------------------------------------------------------------

LOGIN_SCOPE = "login"


class LoginView(APIView):
    """Start a console session. Failed attempts are limited per client address."""

    authentication_classes: list[type] = []
    permission_classes = [permissions.AllowAny]

    def get_authenticate_header(self, request: Request) -> str:
        # 401 needs a challenge; a non-HTTP scheme keeps browsers from prompting.
        return "Session"

    @extend_schema(request=s.LoginSerializer, responses=s.MeSerializer)
    def post(self, request: Request) -> Response:
        ip = client_ip(request._request)
        if ratelimit.is_blocked(LOGIN_SCOPE, ip):
            raise Throttled(wait=ratelimit.retry_after_seconds())
        serializer = s.LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        otp = data.pop("otp", "")
        name = data["username"]
        if accounts.login_locked(name):
            ratelimit.record_failure(LOGIN_SCOPE, ip)
            raise exceptions.AuthenticationFailed(
                "too many wrong passwords or codes for this account; wait, or reset the password"
            )
        user = authenticate(request._request, **data)
        if user is not None and two_factor.is_enabled(user):
            if not otp:  # the password was right; say what else is needed
                raise exceptions.AuthenticationFailed(
                    "this account has two-factor sign-in: send the app's code as otp",
                    code="otp_required",
                )
            if not two_factor.verify(user, otp):
                user = None
        if user is None:
            ratelimit.record_failure(LOGIN_SCOPE, ip)
            accounts.record_login_failure(name)
            raise exceptions.AuthenticationFailed("invalid username, password or code")
        accounts.clear_login_failures(name)
        login(request._request, user)
        return Response(_me(request, user))


class LogoutView(APIView):
    @extend_schema(request=None, responses={204: None})
    def post(self, request: Request) -> Response:
        logout(request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer)
    def get(self, request: Request) -> Response:
        return Response(_me(request, request.user))


def _me(request: Request, user: Any) -> dict[str, Any]:
    if isinstance(request.auth, ApiKey):
        key = request.auth
        return {
            "username": key.service_account.principal,
            "is_staff": False,
            "api_key": key.key_id,
            "tenants": [{"slug": key.tenant.slug, "role": None}],
        }
    memberships = Membership.objects.filter(user=user).select_related("tenant")
    return {
        "username": user.get_username(),
        "is_staff": bool(user.is_staff),
        "api_key": None,
        "tenants": [{"slug": m.tenant.slug, "role": m.role} for m in memberships],
    }
