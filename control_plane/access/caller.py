"""Who is calling a REST view, inside which tenant, and what they may do there.

Resolved once per request by the admin API's
:class:`~control_plane.api.base.TenantScopedViewSet`, which checks each action's
:class:`~control_plane.access.policy.Need`, and by the data API's views
(``control_plane.streams.views``). It lives here, below both, so the data API need not
import the admin API (which routes to it):

* a **user** acts with their membership role (viewer < developer < admin < owner);
* an **API key** acts as its service account, allowed exactly what the tenant's ACLs
  allow (Kafka semantics: cluster-level operations for managing accounts, keys and ACLs;
  topic-level operations for topics).

A tenant the caller does not belong to does not exist for them (404, never 403).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rest_framework import exceptions
from rest_framework.request import Request

from control_plane.access.models import ApiKey
from control_plane.access.policy import Need
from control_plane.access.services import authorize_key, tenant_bindings
from control_plane.core.actor import Actor
from control_plane.core.http import client_ip
from control_plane.core.request_context import bind_tenant, bind_user
from control_plane.tenancy.models import Membership, Role, Tenant
from data_plane.acl import CLUSTER_RESOURCE_NAME, AclBinding, Operation, ResourceType


@dataclass
class Access:
    tenant: Tenant
    actor: Actor
    role: str | None = None
    api_key: ApiKey | None = None
    _bindings: list[AclBinding] | None = field(default=None, repr=False)

    @property
    def bindings(self) -> list[AclBinding]:
        if self._bindings is None:
            self._bindings = tenant_bindings(self.tenant.pk)
        return self._bindings

    def key_may(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        assert self.api_key is not None
        return authorize_key(
            self.api_key,
            host=self.actor.source_ip,
            operation=operation,
            resource_type=resource_type,
            resource_name=name,
            bindings=self.bindings,
        ).allowed

    def require(self, need: Need, resource_name: str | None = None) -> None:
        """Raise PermissionDenied unless the caller meets ``need``."""
        if self.api_key is None:
            if need.role is None:
                raise exceptions.PermissionDenied("this action is not available to users")
            if self.role is None or not Role.at_least(self.role, need.role):
                raise exceptions.PermissionDenied(
                    f"this action needs the {need.role} role or higher in tenant {self.tenant.slug}"
                )
            return
        if need.operation is None:
            raise exceptions.PermissionDenied("this action is not available to API keys")
        name = (
            CLUSTER_RESOURCE_NAME if need.resource_type is ResourceType.CLUSTER else resource_name
        )
        assert name is not None
        if not self.key_may(need.operation, need.resource_type, name):
            raise exceptions.PermissionDenied(
                f"{self.api_key.service_account.principal} is not authorized to "
                f"{need.operation.value} {need.resource_type.value} {name!r}"
            )


def resolve_access(request: Request, tenant_slug: str) -> Access:
    ip = client_ip(request._request)
    if isinstance(request.auth, ApiKey):
        key = request.auth
        if key.tenant.slug != tenant_slug:
            raise exceptions.NotFound(f"tenant {tenant_slug!r} not found")
        bind_tenant(key.tenant.slug)
        bind_user(None, api_key=key)
        return Access(tenant=key.tenant, actor=Actor(api_key=key, source_ip=ip), api_key=key)
    membership = (
        Membership.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, user=request.user)
        .first()
    )
    if membership is None:
        raise exceptions.NotFound(f"tenant {tenant_slug!r} not found")
    bind_tenant(membership.tenant.slug)
    bind_user(request.user)
    return Access(
        tenant=membership.tenant,
        actor=Actor(user=request.user, source_ip=ip),
        role=membership.role,
    )


def request_actor(request: Request) -> Actor:
    ip = client_ip(request._request)
    if isinstance(request.auth, ApiKey):
        bind_user(None, api_key=request.auth)
        return Actor(api_key=request.auth, source_ip=ip)
    bind_user(request.user)
    return Actor(user=request.user, source_ip=ip)
