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

An operator (an active staff user of the control plane) may act in one tenant over the
Kafka protocol as ``__millrace-operator@<tenant slug>/<user id>``, with the password that
``manage.py operator_credentials`` prints (derived from the shared secret and the user
name, so it differs per operator and per tenant, and only someone who holds the secret can
make one). It may administer the tenant's topics and cluster resources (create, delete,
alter, configure; read and describe) and is the only principal that may place replicas by
hand (CreateTopics/CreatePartitions with replica assignments); it may not write records or
join groups. Deactivating the user, or taking staff status away, ends it at the next
authentication; changes it makes are audited under the user's name.

The platform's Connect fleet (``manage.py connect --fleet``) runs each tenant's Connect
cluster as ``__millrace-connect@<tenant slug>``: it may only use that cluster's own
resources (the topics ``connect-configs``, ``connect-offsets`` and ``connect-status``, the
group ``connect-cluster``), never a tenant's data. Each connector's clients act as the API
key its config names (``kafka.api.key``), as delegated principals (below), so the key's
ACLs and quotas apply to the connector as to any client.

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
OPERATOR_PREFIX = "__millrace-operator@"
OPERATOR_PRINCIPAL_NAME = "User:__millrace-operator"
OPERATOR = (
    ALLOWED
    | {
        (op, ResourceType.TOPIC)
        for op in (
            Operation.CREATE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        )
    }
    | {
        (op, ResourceType.CLUSTER)
        for op in (
            Operation.CREATE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        )
    }
)
CONNECT_PREFIX = "__millrace-connect@"
CONNECT_PRINCIPAL_NAME = "User:__millrace-connect"
# A tenant's Connect cluster as the fleet runs it: Kafka's sample names.
CONNECT_GROUP = "connect-cluster"
CONNECT_TOPICS = ("connect-configs", "connect-offsets", "connect-status")
CONNECT = frozenset(
    {
        (op, ResourceType.TOPIC)
        for op in (
            Operation.READ,
            Operation.WRITE,
            Operation.DESCRIBE,
            Operation.CREATE,
            Operation.DESCRIBE_CONFIGS,
        )
    }
    | {(Operation.READ, ResourceType.GROUP), (Operation.DESCRIBE, ResourceType.GROUP)}
    | {
        (Operation.DESCRIBE, ResourceType.CLUSTER),
        (Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER),
    }
)
# ... on these resources only.
CONNECT_RESOURCES = frozenset(
    {(ResourceType.TOPIC, name) for name in CONNECT_TOPICS} | {(ResourceType.GROUP, CONNECT_GROUP)}
)
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


def connect_username(tenant_slug: str) -> str:
    return CONNECT_PREFIX + tenant_slug


def connect_tenant(user: str) -> str | None:
    """The tenant a Connect fleet user name runs the Connect cluster of, or None."""
    if not user.startswith(CONNECT_PREFIX):
        return None
    return user[len(CONNECT_PREFIX) :] or None


def operator_username(tenant_slug: str, user_id: int) -> str:
    return f"{OPERATOR_PREFIX}{tenant_slug}/{user_id}"


def operator_member(user: str) -> tuple[str, int] | None:
    """(tenant slug, staff user id) an operator user name acts as, or None if it is not one."""
    if not user.startswith(OPERATOR_PREFIX):
        return None
    slug, sep, user_id = user[len(OPERATOR_PREFIX) :].partition("/")
    if not sep or not slug or not user_id.isdigit():
        return None
    return slug, int(user_id)


def operator_password(secret: str, user: str) -> str:
    """An operator's password: one per operator user name, derivable only with the secret."""
    message = f"millrace operator principal v1\0{user}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def password(secret: str) -> str:
    """The internal password (never stored, never sent: SCRAM proves it)."""
    return hmac.new(secret.encode(), b"millrace internal principal v1", hashlib.sha256).hexdigest()


@functools.lru_cache(maxsize=256)
def scram_credentials(secret: str, user: str, mechanism: str) -> tuple[bytes, bytes, bytes, int]:
    """(salt, stored key, server key, iterations) for an internal user; deterministic.

    An operator's user name gets its own password (``operator_password``); every other
    internal user proves the shared one."""
    salt = hmac.new(secret.encode(), f"salt:{mechanism}:{user}".encode(), hashlib.sha256)
    secret_password = (
        operator_password(secret, user) if operator_member(user) is not None else password(secret)
    )
    _, stored, server, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
        secret_password, iteration_count=ITERATIONS, salt=salt.digest()[:16]
    )
    return salt.digest()[:16], stored, server, iterations
