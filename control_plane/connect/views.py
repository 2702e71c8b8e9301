"""Kafka Connect's REST API under each tenant's API: ``/api/v1/tenants/{t}/connect/...``.

The paths and bodies are Kafka Connect's (``/connectors``, ``/connectors/{name}/config``,
``/status``, ``/restart``, ``/pause``, ``/resume``, ``/stop``, ``/tasks``,
``/connector-plugins``, ``.../config/validate``), with or without a trailing slash, so
tools written for Kafka Connect work with the tenant's base URL. Errors are Kafka
Connect's too: ``{"error_code": <HTTP status>, "message": "..."}``.

API keys act as themselves on the cluster's topics (their ACLs: Read on
``connect-configs`` and ``connect-status`` to look, Write on ``connect-configs`` to
change, Create on the three topics for a tenant's first connector); members act through
the console principal (viewers look, developers and up change). Each change is a function
of ``services`` (validated, written, audited), the console's as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions
from rest_framework import serializers as drf
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from control_plane.access.caller import Access, resolve_access
from control_plane.access.policy import Need
from control_plane.connect import services
from control_plane.connect.services import CONFIGS, OFFSETS, STATUS, Cluster, ConnectError
from control_plane.core.actor import Actor
from control_plane.core.errors import ServiceError
from control_plane.streams.kafka import Delegation
from control_plane.tenancy.models import Tenant
from data_plane.acl import Operation, ResourceType
from data_plane.connect.plugins import plugins_json

OBJECT = OpenApiTypes.OBJECT
ERROR = inline_serializer(
    "ConnectError",
    {"error_code": drf.IntegerField(), "message": drf.CharField()},
)


def _bool(request: Request, name: str) -> bool:
    return str(request.query_params.get(name, "false")).lower() == "true"


class ConnectView(APIView):
    """Resolves the caller and answers errors in Kafka Connect's shape."""

    access: Access
    who: Delegation

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.access = resolve_access(request, kwargs["tenant_slug"])
        if self.access.api_key is not None:
            self.who = Delegation(self.access.tenant.slug, self.access.api_key.key_id)
        else:
            self.who = Delegation.console(self.access.tenant.slug, request.user.pk)

    @property
    def cluster(self) -> Cluster:
        """The tenant's Connect cluster (reached only by actions that need the brokers)."""
        return Cluster(self.who)

    def can(self, write: bool, *topics: str) -> None:
        for topic in topics:
            self.access.require(services.WRITE if write else services.READ, resource_name=topic)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ConnectError):
            return Response({"error_code": exc.status, "message": exc.message}, status=exc.status)
        if isinstance(exc, ServiceError):
            return Response({"error_code": exc.status, "message": exc.message}, status=exc.status)
        if isinstance(exc, exceptions.APIException):
            status = exc.status_code
            detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
            response = Response({"error_code": status, "message": detail}, status=status)
            if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
                header = self.get_authenticate_header(self.request)
                if header:
                    response["WWW-Authenticate"] = header
            return response
        raise exc

    def body(self, request: Request) -> dict[str, Any]:
        if not isinstance(request.data, dict):
            raise ConnectError(400, "the body must be a JSON object")
        return dict(request.data)

    @property
    def changer(self) -> tuple[Cluster, Actor, Tenant]:
        """What a change of ``services`` is made with: whom as, by whom, in which tenant."""
        return self.cluster, self.access.actor, self.access.tenant


class ConnectorsView(ConnectView):
    @extend_schema(
        operation_id="connect_connectors_list",
        summary="List connectors (`?expand=status`, `?expand=info`)",
        tags=["connect"],
        responses={200: OBJECT, 403: ERROR},
    )
    def get(self, request: Request, tenant_slug: str) -> Response:
        self.can(False, CONFIGS)
        expand = request.query_params.getlist("expand")
        with self.cluster.configs() as store:
            snapshot = store.snapshot() if store is not None else None
        names = sorted(snapshot.connectors) if snapshot is not None else []
        if not expand:
            return Response(names)
        assert snapshot is not None or not names
        statuses_needed = "status" in expand
        if statuses_needed:
            self.can(False, STATUS)
        answer: dict[str, Any] = {}
        with self.cluster.statuses() as statuses:
            for name in names:
                assert snapshot is not None
                config = snapshot.connectors[name]
                tasks = len(snapshot.tasks.get(name, []))
                entry: dict[str, Any] = {}
                if "info" in expand:
                    entry["info"] = services.connector_info(name, config, tasks)
                if statuses_needed:
                    entry["status"] = services.connector_status(name, config, statuses, tasks)
                answer[name] = entry
        return Response(answer)

    @extend_schema(
        operation_id="connect_connectors_create",
        summary='Create a connector: `{"name", "config"}`',
        tags=["connect"],
        request=OBJECT,
        responses={201: OBJECT, 400: ERROR, 409: ERROR},
    )
    def post(self, request: Request, tenant_slug: str) -> Response:
        self.can(True, CONFIGS)
        body = self.body(request)
        name = services.connector_name(body.get("name") or (body.get("config") or {}).get("name"))
        config = services.string_config(body.get("config") or {})
        info = services.create_connector(*self.changer, name, config)
        return Response(info, status=201)


class OneConnectorView(ConnectView):
    """The views of one connector (no HTTP methods here: each view has only its own)."""

    def _config(self, name: str) -> tuple[dict[str, str], int]:
        return services.connector_config(self.cluster, name)


class ConnectorView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_get",
        summary="A connector: name, config, tasks, type",
        tags=["connect"],
        responses={200: OBJECT, 404: ERROR},
    )
    def get(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(False, CONFIGS)
        config, tasks = self._config(name)
        return Response(services.connector_info(name, config, tasks))

    @extend_schema(
        operation_id="connect_connector_delete",
        summary="Delete a connector",
        tags=["connect"],
        responses={204: None, 404: ERROR},
    )
    def delete(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(True, CONFIGS)
        services.delete_connector(*self.changer, name)
        return Response(status=204)


class ConnectorConfigView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_config_get",
        summary="A connector's config",
        tags=["connect"],
        responses={200: OBJECT, 404: ERROR},
    )
    def get(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(False, CONFIGS)
        config, _ = self._config(name)
        return Response({**config, "name": name})

    def _answer(self, written: tuple[dict[str, Any], bool]) -> Response:
        info, created = written
        return Response(info, status=201 if created else 200)

    @extend_schema(
        operation_id="connect_connector_config_put",
        summary="Create or replace a connector's config",
        tags=["connect"],
        request=OBJECT,
        responses={200: OBJECT, 201: OBJECT, 400: ERROR},
    )
    def put(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(True, CONFIGS)
        config = services.string_config(self.body(request))
        if config.get("name", name) != name:
            raise ConnectError(400, f"the config's name {config['name']!r} is not {name!r}")
        return self._answer(services.put_connector_config(*self.changer, name, config))

    @extend_schema(
        operation_id="connect_connector_config_patch",
        summary="Change some keys of a connector's config (null removes a key)",
        tags=["connect"],
        request=OBJECT,
        responses={200: OBJECT, 400: ERROR, 404: ERROR},
    )
    def patch(self, request: Request, tenant_slug: str, name: str) -> Response:
        """KIP-477: keys set are changed, keys set to null are removed."""
        self.can(True, CONFIGS)
        changes = self.body(request)
        return self._answer(services.patch_connector_config(*self.changer, name, changes))


class ConnectorStatusView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_status",
        summary="A connector's and its tasks' states and workers",
        tags=["connect"],
        responses={200: OBJECT, 404: ERROR},
    )
    def get(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(False, CONFIGS, STATUS)
        config, tasks = self._config(name)
        with self.cluster.statuses() as statuses:
            return Response(services.connector_status(name, config, statuses, tasks))


class ConnectorStateView(OneConnectorView):
    """``PUT /connectors/{name}/pause``, ``/resume`` and ``/stop``: 202, no body."""

    @extend_schema(
        operation_id="connect_connector_state",
        summary="Pause, resume or stop a connector",
        tags=["connect"],
        request=None,
        responses={202: None, 404: ERROR},
    )
    def put(self, request: Request, tenant_slug: str, name: str, action: str) -> Response:
        self.can(True, CONFIGS)
        services.set_target_state(*self.changer, name, action)
        return Response(status=202)


class ConnectorRestartView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_restart",
        summary="Restart a connector (`includeTasks`, `onlyFailed`)",
        tags=["connect"],
        request=None,
        responses={202: OBJECT, 204: None, 404: ERROR},
    )
    def post(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(True, CONFIGS)
        include_tasks, only_failed = _bool(request, "includeTasks"), _bool(request, "onlyFailed")
        status = services.restart_connector(*self.changer, name, include_tasks, only_failed)
        if status is None:
            return Response(status=204)
        return Response(status, status=202)


class OffsetsView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_offsets",
        summary="A connector's committed offsets (KIP-875)",
        tags=["connect"],
        responses={200: OBJECT, 404: ERROR},
    )
    def get(self, request: Request, tenant_slug: str, name: str) -> Response:
        """Sources: their offsets in ``connect-offsets``; sinks: their group's."""
        self.can(False, CONFIGS)
        config, _ = self._config(name)
        if services.connector_type(config) == "sink":
            self.access.require(
                Need("viewer", Operation.DESCRIBE, ResourceType.GROUP),
                resource_name=f"connect-{name}",
            )
        else:
            self.can(False, OFFSETS)
        return Response({"offsets": services.connector_offsets(self.cluster, name, config)})

    def _may_change(self, name: str, operation: Operation) -> Callable[[str], None]:
        """The check of a change of offsets, once the connector's type is known."""

        def authorize(kind: str) -> None:
            if kind == "sink":
                self._group_access(name, operation)
            else:
                self.can(True, OFFSETS)

        return authorize

    @extend_schema(
        operation_id="connect_connector_offsets_alter",
        summary="Alter a stopped connector's offsets (KIP-875)",
        tags=["connect"],
        request=OBJECT,
        responses={200: OBJECT, 400: ERROR, 404: ERROR},
    )
    def patch(self, request: Request, tenant_slug: str, name: str) -> Response:
        """``{"offsets": [{"partition": {...}, "offset": {...} | null}]}``: sources' partitions
        and offsets as the connector writes them; sinks' ``{"kafka_topic", "kafka_partition"}``
        and ``{"kafka_offset"}``. A null offset removes the partition's."""
        self.can(True, CONFIGS)
        body = self.body(request)
        services.alter_offsets(*self.changer, name, body, self._may_change(name, Operation.READ))
        return Response({"message": "The offsets for this connector have been altered "
                                    "successfully"})  # fmt: skip

    @extend_schema(
        operation_id="connect_connector_offsets_reset",
        summary="Reset a stopped connector's offsets (KIP-875)",
        tags=["connect"],
        request=None,
        responses={200: OBJECT, 400: ERROR, 404: ERROR},
    )
    def delete(self, request: Request, tenant_slug: str, name: str) -> Response:
        """Sources: every offset in ``connect-offsets`` removed; sinks: the group deleted."""
        self.can(True, CONFIGS)
        services.reset_offsets(*self.changer, name, self._may_change(name, Operation.DELETE))
        return Response({"message": "The offsets for this connector have been reset "
                                    "successfully"})  # fmt: skip

    def _group_access(self, name: str, operation: Operation = Operation.READ) -> None:
        self.access.require(
            Need("developer", operation, ResourceType.GROUP), resource_name=f"connect-{name}"
        )


class TopicsView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_topics",
        summary="The topics a connector has used (KIP-558)",
        tags=["connect"],
        responses={200: OBJECT, 404: ERROR},
    )
    def get(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(False, CONFIGS, STATUS)
        self._config(name)
        with self.cluster.statuses() as statuses:
            topics = statuses.topics(name) if statuses is not None else []
        return Response({name: {"topics": topics}})


class TopicsResetView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_topics_reset",
        summary="Forget the topics a connector has used (KIP-558)",
        tags=["connect"],
        request=None,
        responses={200: None, 404: ERROR},
    )
    def put(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(True, STATUS)
        services.reset_topics(*self.changer, name)
        return Response(status=200)


class TasksView(OneConnectorView):
    @extend_schema(
        operation_id="connect_connector_tasks",
        summary="A connector's task configs",
        tags=["connect"],
        responses={200: OBJECT, 404: ERROR},
    )
    def get(self, request: Request, tenant_slug: str, name: str) -> Response:
        self.can(False, CONFIGS)
        with services.existing(self.cluster, name) as (_, snapshot):
            configs = snapshot.tasks.get(name, [])
        return Response(
            [{"id": {"connector": name, "task": i}, "config": c} for i, c in enumerate(configs)]
        )


class TaskStatusView(OneConnectorView):
    @extend_schema(
        operation_id="connect_task_status",
        summary="A task's state and worker",
        tags=["connect"],
        responses={200: OBJECT, 404: ERROR},
    )
    def get(self, request: Request, tenant_slug: str, name: str, task: str) -> Response:
        self.can(False, CONFIGS, STATUS)
        config, tasks = self._config(name)
        if int(task) >= tasks:
            raise ConnectError(404, f"Task {name}-{task} not found")
        with self.cluster.statuses() as statuses:
            status = services.connector_status(name, config, statuses, tasks)
        return Response(status["tasks"][int(task)])


class TaskRestartView(OneConnectorView):
    @extend_schema(
        operation_id="connect_task_restart",
        summary="Restart a task",
        tags=["connect"],
        request=None,
        responses={204: None, 404: ERROR},
    )
    def post(self, request: Request, tenant_slug: str, name: str, task: str) -> Response:
        self.can(True, CONFIGS)
        services.restart_task(*self.changer, name, int(task))
        return Response(status=204)


class PluginsView(ConnectView):
    @extend_schema(
        operation_id="connect_plugins",
        summary="The connector plugins",
        tags=["connect"],
        responses={200: OBJECT},
    )
    def get(self, request: Request, tenant_slug: str) -> Response:
        return Response(plugins_json())


class ValidateView(ConnectView):
    @extend_schema(
        operation_id="connect_plugin_validate",
        summary="Validate a connector config: every key's errors",
        tags=["connect"],
        request=OBJECT,
        responses={200: OBJECT, 404: ERROR},
    )
    def put(self, request: Request, tenant_slug: str, plugin: str) -> Response:
        config = services.string_config(self.body(request))
        return Response(services.validate_plugin(plugin, config, tenant_slug))
