"""The platform's Connect fleet: one process running the Connect cluster of every tenant
that uses Connect, so that a connector created in the console or over the REST API runs
without the tenant starting workers of its own (``manage.py connect --fleet``).

For each tenant the fleet runs a distributed worker of the tenant's default Connect
cluster (group ``connect-cluster``, topics ``connect-configs``, ``connect-offsets``,
``connect-status``: the names the REST API writes), as the tenant's Connect principal
(``data_plane.internal_auth``), which may touch only those topics and that group. Each
connector runs as the API key its config names in ``kafka.api.key``: its producers,
consumers and admin clients are delegated principals of that key, so the key's ACLs,
quotas and revocation apply to the connector as to any client of the key. Connectors may
not set their own client settings (``connector.client.config.override.policy=None``),
and only the built-in plugins exist.

Several fleet processes may run: each joins every tenant's group, and the tenants' work
is spread over them as over any distributed workers. Which tenants to run is asked of
``tenants`` every ``interval`` seconds; a tenant that stops using Connect (or is
deleted) has its worker stopped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from data_plane import internal_auth
from data_plane.connect.config import ConfigException
from data_plane.connect.distributed import DistributedHerder

logger = logging.getLogger("millrace.connect.fleet")

API_KEY = "kafka.api.key"
RETRY_MAX_S = 30.0


def worker_config(tenant_slug: str, base: Mapping[str, str]) -> dict[str, str]:
    """A tenant's worker settings: ``base`` (brokers, timeouts, converters) as the
    tenant's Connect principal, in the tenant's default Connect cluster; ``file.root``
    becomes the tenant's directory under it."""
    configs, offsets, status = internal_auth.CONNECT_TOPICS
    root = base.get("file.root")
    return {
        **{k: v for k, v in base.items() if not k.startswith("sasl.")},
        # The file connectors read and write inside the tenant's own directory only.
        **({"file.root": str(Path(root) / tenant_slug)} if root else {}),
        "security.protocol": base.get("security.protocol", "SASL_PLAINTEXT"),
        "sasl.mechanism": internal_auth.MECHANISM,
        "sasl.username": internal_auth.connect_username(tenant_slug),
        "sasl.password": base["sasl.password"],
        "group.id": internal_auth.CONNECT_GROUP,
        "config.storage.topic": configs,
        "offset.storage.topic": offsets,
        "status.storage.topic": status,
        "connector.client.config.override.policy": "None",
    }


def key_identity(
    tenant_slug: str, password: str, key_error: Callable[[str, str], str | None]
) -> Callable[[Mapping[str, str]], dict[str, str]]:
    """The client identity of a connector of ``tenant_slug``: the key its config names,
    as a delegated principal. ``key_error(tenant, key id)`` says why a key may not be
    used (unknown, revoked, another tenant's), or None."""

    def identity(connector: Mapping[str, str]) -> dict[str, str]:
        key = (connector.get(API_KEY) or "").strip()
        if not key:
            raise ConfigException(
                API_KEY, "name the API key this connector runs as (its ACLs and quotas apply)"
            )
        problem = key_error(tenant_slug, key)
        if problem is not None:
            raise ConfigException(API_KEY, problem)
        return {
            "sasl.mechanism": internal_auth.MECHANISM,
            "sasl.username": internal_auth.proxy_username(tenant_slug, key),
            "sasl.password": password,
        }

    return identity


@dataclass
class _Running:
    herder: DistributedHerder | None
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class Fleet:
    """Runs a worker for each tenant ``tenants()`` names; see the module's doc."""

    def __init__(
        self,
        base: Mapping[str, str],
        tenants: Callable[[], Iterable[str]],
        key_error: Callable[[str, str], str | None],
        interval: float = 5.0,
    ) -> None:
        if not base.get("bootstrap.servers") or not base.get("sasl.password"):
            raise ConfigException("bootstrap.servers", "the fleet needs brokers and the secret")
        self.base = dict(base)
        self.tenants = tenants
        self.key_error = key_error
        self.interval = interval
        self.running: dict[str, _Running] = {}
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        """Reconcile every ``interval`` seconds until ``stop``; then stop every worker."""
        try:
            while not stop.is_set():
                try:
                    self.reconcile()
                except Exception:  # the tenant list's source is down: keep what runs
                    logger.warning("could not list the tenants using Connect", exc_info=True)
                stop.wait(self.interval)
        finally:
            self.stop()

    def reconcile(self) -> None:
        wanted = set(self.tenants())
        with self._lock:
            for slug in sorted(wanted - set(self.running)):
                self.running[slug] = self._start(slug)
            gone = [self.running.pop(slug) for slug in sorted(set(self.running) - wanted)]
        for running in gone:
            self._stop(running)

    def herder(self, tenant_slug: str) -> DistributedHerder | None:
        with self._lock:
            running = self.running.get(tenant_slug)
            return None if running is None else running.herder

    def _start(self, slug: str) -> _Running:
        running = _Running(None)
        running.thread = threading.Thread(
            target=self._keep_running, args=(slug, running), name=f"fleet-{slug}", daemon=True
        )
        running.thread.start()
        logger.info("running the Connect cluster of tenant %s", slug)
        return running

    def _keep_running(self, slug: str, running: _Running) -> None:
        """The tenant's worker, started again (with a back-off) if it stops by itself."""
        delay = 1.0
        while not running.stop.is_set():
            config = worker_config(slug, self.base)
            identity = key_identity(slug, self.base["sasl.password"], self.key_error)
            try:
                running.herder = DistributedHerder(config, identity=identity)
                running.herder.run(running.stop)
                delay = 1.0
            except Exception:  # a broker outage, the tenant deleted mid-way: try again
                logger.warning("tenant %s: the Connect worker stopped", slug, exc_info=True)
            running.stop.wait(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    @staticmethod
    def _stop(running: _Running) -> None:
        running.stop.set()
        if running.thread is not None:
            running.thread.join(60)

    def stop(self) -> None:
        with self._lock:
            gone = list(self.running.values())
            self.running.clear()
        for running in gone:
            running.stop.set()
        for running in gone:
            self._stop(running)
