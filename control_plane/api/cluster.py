"""Cluster operations for operators (staff users, never API keys): brokers, partitions,
reassignments, decommissioning and rebalancing. Tenants' pages are in ``views``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings
from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.access.caller import request_actor
from control_plane.access.models import ApiKey
from control_plane.catalog.models import Broker, Partition
from control_plane.controller import reassign
from control_plane.core.errors import Conflict, NotFound, ServiceError


class IsOperator(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return not isinstance(request.auth, ApiKey) and bool(request.user.is_staff)


OPERATORS = [permissions.IsAuthenticated, IsOperator]


# --- serializers ----------------------------------------------------------------------------


class BrokerSerializer(serializers.ModelSerializer):
    live = serializers.SerializerMethodField(help_text="running and its lease is current")
    leader_count = serializers.SerializerMethodField(help_text="partitions it leads")
    replica_count = serializers.SerializerMethodField(
        help_text="partition replicas it holds (those leaving it in a reassignment included)"
    )

    class Meta:
        model = Broker
        fields = [
            "id",
            "host",
            "port",
            "rack",
            "state",
            "live",
            "decommissioning",
            "registered_at",
            "last_heartbeat",
            "leader_count",
            "replica_count",
        ]
        read_only_fields = fields

    def get_live(self, broker: Broker) -> bool:
        return broker.id in self.context.get("live", set())

    def get_leader_count(self, broker: Broker) -> int:
        return int(self.context.get("leaders", {}).get(broker.id, 0))

    def get_replica_count(self, broker: Broker) -> int:
        return int(self.context.get("replicas", {}).get(broker.id, 0))


PARTITION_STATUSES = ("online", "under_replicated", "offline", "unassigned")


def partition_status(partition: Partition) -> str:
    """A partition is under-replicated when a replica it keeps (not one a reassignment is
    still copying to) is out of the ISR."""
    if not partition.replicas:
        return "unassigned"
    if partition.leader is None:
        return "offline"
    adding = set(partition.adding_replicas)
    if any(b not in partition.isr for b in partition.replicas if b not in adding):
        return "under_replicated"
    return "online"


class ClusterPartitionSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="topic.tenant.slug")
    topic = serializers.CharField(source="topic.name")
    topic_id = serializers.UUIDField(source="topic.topic_id")
    partition = serializers.IntegerField(source="index")
    status = serializers.SerializerMethodField(
        help_text="online, under_replicated (a replica out of the ISR), offline "
        "(no leader) or unassigned (no replicas yet)"
    )
    leader = serializers.IntegerField(allow_null=True)
    leader_epoch = serializers.IntegerField()
    partition_epoch = serializers.IntegerField()
    replicas = serializers.ListField(child=serializers.IntegerField())
    isr = serializers.ListField(child=serializers.IntegerField())
    adding_replicas = serializers.ListField(
        child=serializers.IntegerField(), help_text="a reassignment is copying to these"
    )
    removing_replicas = serializers.ListField(
        child=serializers.IntegerField(), help_text="a reassignment will drop these"
    )

    def get_status(self, partition: Partition) -> str:
        return partition_status(partition)


class PartitionRefSerializer(serializers.Serializer):
    topic_id = serializers.UUIDField()
    partition = serializers.IntegerField(min_value=0)


class PartitionTargetSerializer(PartitionRefSerializer):
    replicas = serializers.ListField(
        child=serializers.IntegerField(min_value=0),
        allow_empty=False,
        help_text="the new replicas, preferred leader first",
    )


class ReassignRequestSerializer(serializers.Serializer):
    partitions = PartitionTargetSerializer(many=True, allow_empty=False)
    dry_run = serializers.BooleanField(default=False, help_text="validate without changing")


class CancelRequestSerializer(serializers.Serializer):
    partitions = PartitionRefSerializer(many=True, allow_empty=False)


class DryRunSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField(default=False, help_text="plan without changing")


class MoveSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="partition.topic.tenant.slug")
    topic = serializers.CharField(source="partition.topic.name")
    topic_id = serializers.UUIDField(source="partition.topic.topic_id")
    partition = serializers.IntegerField(source="partition.index")
    current = serializers.ListField(child=serializers.IntegerField())
    target = serializers.ListField(child=serializers.IntegerField())


class PlanSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    moves = MoveSerializer(many=True)


def _plan(moves: list[reassign.Move], dry_run: bool, code: int = 200) -> Response:
    return Response(PlanSerializer({"dry_run": dry_run, "moves": moves}).data, status=code)


# --- views ----------------------------------------------------------------------------------


class BrokerViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Registered brokers with their liveness and partition counts (operators only)."""

    queryset = Broker.objects.all()
    serializer_class = BrokerSerializer
    permission_classes = OPERATORS

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        leaders: Counter[int] = Counter()
        replicas: Counter[int] = Counter()
        for leader, members in Partition.objects.values_list("leader", "replicas"):
            if leader is not None:
                leaders[leader] += 1
            replicas.update(members)
        live = Broker.objects.live(settings.MILLRACE_BROKER_LEASE_SECONDS)
        context.update(
            leaders=leaders, replicas=replicas, live=set(live.values_list("id", flat=True))
        )
        return context

    @extend_schema(
        request=DryRunSerializer,
        responses={202: PlanSerializer, 200: PlanSerializer},
        description="Stop placing replicas on this broker and move every replica it holds "
        "to the live broker with the fewest (racks kept apart). All or nothing: 409 if a "
        "replica has nowhere to go or one of its partitions is already being reassigned. "
        "Progress shows in its replica_count and in cluster/reassignments/.",
    )
    @action(detail=True, methods=["post"])
    def decommission(self, request: Request, pk: str | None = None) -> Response:
        body = DryRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dry_run = body.validated_data["dry_run"]
        moves = reassign.decommission_broker(
            self._broker_id(pk), request_actor(request), dry_run=dry_run
        )
        return _plan(moves, dry_run, 200 if dry_run else 202)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["post"])
    def recommission(self, request: Request, pk: str | None = None) -> Response:
        """Let the broker receive replicas again; moves already started are not undone."""
        reassign.recommission_broker(self._broker_id(pk), request_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @staticmethod
    def _broker_id(pk: str | None) -> int:
        try:
            return int(pk or "")
        except ValueError:
            raise NotFound(f"broker {pk!r} is not registered") from None


@extend_schema(
    parameters=[
        OpenApiParameter(
            "status", str, enum=PARTITION_STATUSES, description="only partitions in this state"
        )
    ]
)
class ClusterPartitionViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Every partition's leadership and ISR across tenants (operators only)."""

    queryset = Partition.objects.select_related("topic__tenant").order_by(
        "topic__tenant__slug", "topic__name", "index"
    )
    serializer_class = ClusterPartitionSerializer
    permission_classes = OPERATORS

    def list(self, request: Request) -> Response:
        wanted = request.query_params.get("status")
        if wanted is not None and wanted not in PARTITION_STATUSES:
            raise exceptions.ValidationError(
                {"status": [f"must be one of {', '.join(PARTITION_STATUSES)}"]}
            )
        rows = [p for p in self.get_queryset() if wanted is None or partition_status(p) == wanted]
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


def _partition(ref: dict[str, Any], field: str) -> Partition:
    row = (
        Partition.objects.select_related("topic__tenant")
        .filter(topic__topic_id=ref["topic_id"], index=ref["partition"])
        .first()
    )
    if row is None:
        raise exceptions.ValidationError(
            {field: [f"no partition {ref['partition']} of topic {ref['topic_id']}"]}
        )
    return row


def _in_batch(index: int, exc: ServiceError) -> ServiceError:
    """The same error, its field named within the batch (``partitions[2].replicas``)."""
    field = f"partitions[{index}]" + (f".{exc.field}" if exc.field else "")
    return type(exc)(exc.message, field=field)


class ReassignmentViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Partition reassignments in progress; start or cancel them (operators only).

    A reassignment copies the partition to its new replicas, waits until they are in the
    ISR, then switches (moving leadership if the leader is leaving) and drops the old ones.
    """

    queryset = (
        Partition.objects.exclude(adding_replicas=[], removing_replicas=[])
        .select_related("topic__tenant")
        .order_by("topic__tenant__slug", "topic__name", "index")
    )
    serializer_class = ClusterPartitionSerializer
    permission_classes = OPERATORS

    @extend_schema(
        request=ReassignRequestSerializer,
        responses={202: PlanSerializer, 200: PlanSerializer},
        description="Start moving partitions to new replicas. All or nothing: if one entry "
        "is refused (400 with the entry's field, or 409), none starts.",
    )
    def create(self, request: Request) -> Response:
        body = ReassignRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dry_run = body.validated_data["dry_run"]
        actor = request_actor(request)
        moves = []
        seen: set[int] = set()
        with transaction.atomic():
            eligible = reassign.eligible_broker_ids()
            for i, entry in enumerate(body.validated_data["partitions"]):
                row = _partition(entry, f"partitions[{i}]")
                if row.pk in seen:
                    raise exceptions.ValidationError(
                        {f"partitions[{i}]": ["this partition is already in the request"]}
                    )
                seen.add(row.pk)
                try:
                    target = reassign.validate_target(row, entry["replicas"], eligible)
                    if target == list(row.replicas):
                        continue
                    if reassign.is_reassigning(row):
                        raise Conflict(
                            f"partition {row} is already being reassigned; cancel it first"
                        )
                    if not dry_run:
                        reassign.reassign(row, target, actor)
                    moves.append(reassign.Move(row, target))
                except ServiceError as exc:
                    raise _in_batch(i, exc) from None
        return _plan(moves, dry_run, 200 if dry_run else 202)

    @extend_schema(request=CancelRequestSerializer, responses={200: ClusterPartitionSerializer})
    @action(detail=False, methods=["post"])
    def cancel(self, request: Request) -> Response:
        """Put partitions back on the replicas they had; all or nothing."""
        body = CancelRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = request_actor(request)
        rows = []
        with transaction.atomic():
            for i, entry in enumerate(body.validated_data["partitions"]):
                row = _partition(entry, f"partitions[{i}]")
                try:
                    reassign.cancel(row, actor)
                except ServiceError as exc:
                    raise _in_batch(i, exc) from None
                row.refresh_from_db()
                rows.append(row)
        return Response(ClusterPartitionSerializer(rows, many=True).data)


class RebalanceView(APIView):
    """Spread replicas evenly over the live brokers, e.g. after adding a broker (operators)."""

    permission_classes = OPERATORS

    @extend_schema(request=DryRunSerializer, responses={202: PlanSerializer, 200: PlanSerializer})
    def post(self, request: Request) -> Response:
        body = DryRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dry_run = body.validated_data["dry_run"]
        moves = reassign.rebalance(request_actor(request), dry_run=dry_run)
        return _plan(moves, dry_run, 200 if dry_run else 202)
