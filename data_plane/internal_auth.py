"""The internal principal: how Millrace's own services talk to its brokers.

The control plane needs what only brokers know (log end offsets, the offset for a
timestamp, the timestamp of the record a group will read next). It connects as a Kafka
client with SCRAM, as the user ``__millrace-internal@<tenant slug>``: one tenant per
connection, so everything it asks is scoped to that tenant exactly as a tenant's own key
would be. The password is derived from a secret every Millrace process shares
(``MILLRACE_INTERNAL_SECRET``, by default derived from ``SECRET_KEY``) and is never sent:
the broker derives the same SCRAM credentials and checks the proof.

The internal principal may only read and describe topics and describe the cluster and
groups (no produce, no admin, no group membership or commits): it bypasses tenant ACLs for
those operations only, as Kafka's ``super.users`` would, and tenant ACLs cannot grant it
more.

The console acts for a signed-in member as ``__millrace-console@<tenant slug>/<user id>``:
an internal principal with fixed rights that the broker derives from the member's role
while the membership exists (viewers read and describe, as above; developers and up may
also write to topics), so the console's message browser, test produce and live tail never
need an API key and never get more than the member's role allows.

The web tier's data API (REST produce/consume, WebSocket streams) does not use that
principal: it connects as ``__millrace-proxy@<tenant slug>/<key id>``, proving the same
shared secret, and the broker then acts as that API key exactly, its service account's
ACLs and all (a *delegated* principal). The web tier only opens such a connection after
the caller proved the key's secret to it; a revoked key's delegated connections are
closed like the key's own.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

import scramp  # type: ignore[import-untyped]

from data_plane.acl import Operation, ResourceType

USER_PREFIX = "__millrace-internal@"
PROXY_PREFIX = "__millrace-proxy@"
# Brokers fetching from each other (replication): one principal for the whole cluster, which
# names topics by topic id because it belongs to no tenant.
BROKER_USER = "__millrace-broker"
BROKER_PRINCIPAL_NAME = "User:__millrace-broker"
PRINCIPAL_NAME = "User:__millrace-internal"
ALLOWED = frozenset(
    {
        (Operation.READ, ResourceType.TOPIC),
        (Operation.DESCRIBE, ResourceType.TOPIC),
        (Operation.DESCRIBE, ResourceType.CLUSTER),
        (Operation.DESCRIBE, ResourceType.GROUP),
    }
)
CONSOLE_PREFIX = "__millrace-console@"
CONSOLE_PRINCIPAL_NAME = "User:__millrace-console"
# What a console member whose role may change topics' data (developer and up) may do.
CONSOLE_WRITER = ALLOWED | {(Operation.WRITE, ResourceType.TOPIC)}
MECHANISM = "SCRAM-SHA-512"
ITERATIONS = 4096


def username(tenant_slug: str) -> str:
    return USER_PREFIX + tenant_slug


def tenant_slug(user: str) -> str | None:
    """The tenant an internal user name acts in, or None if it is not internal."""
    if not user.startswith(USER_PREFIX):
        return None
    slug = user[len(USER_PREFIX) :]
    return slug or None


def proxy_username(tenant_slug: str, key_id: str) -> str:
    return f"{PROXY_PREFIX}{tenant_slug}/{key_id}"


def proxied_key(user: str) -> tuple[str, str] | None:
    """(tenant slug, key id) a delegated user name acts as, or None if it is not one."""
    if not user.startswith(PROXY_PREFIX):
        return None
    slug, sep, key_id = user[len(PROXY_PREFIX) :].partition("/")
    if not sep or not slug or not key_id:
        return None
    return slug, key_id


def console_username(tenant_slug: str, user_id: int) -> str:
    return f"{CONSOLE_PREFIX}{tenant_slug}/{user_id}"


def console_member(user: str) -> tuple[str, int] | None:
    """(tenant slug, user id) a console user name acts for, or None if it is not one."""
    if not user.startswith(CONSOLE_PREFIX):
        return None
    slug, sep, user_id = user[len(CONSOLE_PREFIX) :].partition("/")
    if not sep or not slug or not user_id.isdigit():
        return None
    return slug, int(user_id)


def password(secret: str) -> str:
    """The internal password (never stored, never sent: SCRAM proves it)."""
    return hmac.new(secret.encode(), b"millrace internal principal v1", hashlib.sha256).hexdigest()


@functools.lru_cache(maxsize=256)
def scram_credentials(secret: str, user: str, mechanism: str) -> tuple[bytes, bytes, bytes, int]:
    """(salt, stored key, server key, iterations) for an internal user; deterministic."""
    salt = hmac.new(secret.encode(), f"salt:{mechanism}:{user}".encode(), hashlib.sha256)
    _, stored, server, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
        password(secret), iteration_count=ITERATIONS, salt=salt.digest()[:16]
    )
    return salt.digest()[:16], stored, server, iterations
