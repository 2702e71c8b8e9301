"""The base viewset that scopes every query to the caller's tenant, once.

Subclasses declare ``needs`` (action -> :class:`Need`, the tables of
:mod:`control_plane.access.policy`) and ``tenant_field`` (the lookup from their model to
its tenant). An action without an entry in ``needs`` is refused: deny by default.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import QuerySet
from rest_framework import exceptions, viewsets
from rest_framework.request import Request

from control_plane.access.caller import Access, resolve_access
from control_plane.access.policy import Need
from data_plane.acl import ResourceType


class TenantScopedViewSet(viewsets.GenericViewSet):
    needs: ClassVar[dict[str, Need]] = {}
    tenant_field = "tenant"
    access: Access

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.access = resolve_access(request, kwargs["tenant_slug"])
        need = self.needs.get(self.action or "")
        if need is None:
            raise exceptions.MethodNotAllowed(request.method or "")
        name = kwargs.get(self.lookup_url_kwarg or self.lookup_field)
        deferred = (
            self.access.api_key is not None
            and need.operation is not None
            and need.resource_type is not ResourceType.CLUSTER
            and name is None
        )
        # A key's topic-level need with no name in the URL (list, create) is checked by
        # the view against each row or the request body.
        if deferred:
            return
        try:
            self.access.require(need, resource_name=name)
        except exceptions.PermissionDenied:
            # Another tenant's object (or none at all) is "not found", whatever the
            # caller's rights. A key's topic-level check stays a 403 for any name, as
            # in Kafka, so it reveals nothing about which topics exist.
            key_topic_check = (
                self.access.api_key is not None and need.resource_type is not ResourceType.CLUSTER
            )
            lookup = {self.lookup_field: name}
            if name is not None and not key_topic_check:
                if not self.get_queryset().filter(**lookup).exists():
                    raise exceptions.NotFound() from None
            raise

    def get_queryset(self) -> QuerySet[Any]:
        queryset = super().get_queryset()
        if getattr(self, "swagger_fake_view", False):
            return queryset.none()
        return queryset.filter(**{self.tenant_field: self.access.tenant})

    @property
    def actor(self):  # type: ignore[no-untyped-def]
        return self.access.actor
