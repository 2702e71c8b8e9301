"""Recording audit events. Call inside the transaction of the change it describes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from control_plane.audit.models import ActorType, AuditEvent
from control_plane.core.actor import Actor

if TYPE_CHECKING:
    from control_plane.tenancy.models import Tenant


def record_event(
    actor: Actor,
    *,
    tenant: Tenant | None,
    action: str,
    object_type: str,
    object_id: object,
    object_repr: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    if actor.api_key is not None:
        actor_type = ActorType.API_KEY
    elif actor.user is not None:
        actor_type = ActorType.USER
    else:
        actor_type = ActorType.SYSTEM
    return AuditEvent.objects.create(
        tenant=tenant,
        tenant_slug=tenant.slug if tenant else "",
        actor_type=actor_type,
        actor_user=actor.user if actor.user is not None and actor.user.pk else None,
        actor=actor.label,
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        object_repr=object_repr[:300],
        before=before,
        after=after,
        source_ip=actor.source_ip,
    )
