"""The broker process: an asyncio server speaking Kafka's protocol over the partition log.

* **Metadata** arrives as immutable snapshots from the store, refreshed by a worker thread
  on every change notification and at least every ``metadata_refresh_seconds``; handlers
  read ``broker.snapshot`` without locks. Partitions created before enough brokers were
  up are placed over the live brokers, logs of deleted topics are removed, and config
  changes reach the open logs.
* **Connections** are handled one request at a time, in order (Kafka mutes a connection
  while its request is in flight), so responses never reorder and one slow client holds
  at most one request's worth of memory. Frames are capped before allocation: 512 KiB
  until SASL completes, ``max_request_bytes`` after.
* **Fetch data** is written with ``loop.sendfile`` (os.sendfile on plain sockets) straight
  from segment files.
* **Listeners**: the plain one (SASL_PLAINTEXT, also used between brokers and by the web
  tier) and, when configured, a TLS one (SASL_SSL). Each connection is answered with the
  addresses of the listener it came in on.
* **Shutdown** (SIGTERM/SIGINT) is *controlled*, like Kafka's: first ask the controller to
  hand this broker's leaderships to other in-sync replicas and wait until the metadata
  shows it (bounded), so clients move on with retriable NOT_LEADER errors; then stop
  accepting, let in-flight requests finish, flush and close every log (writing the
  clean-shutdown markers), deregister.
* **Metrics and health** (metrics.py): ``/metrics``, ``/healthz``, ``/readyz`` on their own
  HTTP port.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from data_plane.broker.client_versions import ClientVersions
from data_plane.broker.config import BrokerConfig
from data_plane.broker.connection import Connection
from data_plane.broker.handlers.context import Services
from data_plane.broker.heartbeat import Heartbeat
from data_plane.broker.limits import FailureDelays, MemoryPool
from data_plane.broker.metadata_cache import MetadataCache, Refresh
from data_plane.broker.metrics import BrokerMetrics, BrokerState, HealthServer
from data_plane.broker.ports import MetadataStore
from data_plane.broker.quotas import ByteRateQuotas
from data_plane.broker.txn_markers import BrokerMarkerWriter
from data_plane.broker.txn_router import TransactionRouter
from data_plane.broker.usage import LedPartition, Meter
from data_plane.groups.consumer_group import ConsumerGroupCoordinator
from data_plane.groups.coordinator import GroupCoordinator
from data_plane.log.config import LogConfig
from data_plane.log.manager import LogManager
from data_plane.metadata.model import BrokerInfo, MetadataSnapshot, TopicInfo
from data_plane.replication.manager import ReplicaManager
from data_plane.txn.coordinator import TransactionCoordinator

logger = logging.getLogger("millrace.broker")
T = TypeVar("T")

PRODUCER_ID_BLOCK = 1000
# How long EndTxn waits for its markers before answering (the decision is durable before).
END_TXN_WAIT_S = 5.0
# How often the tenants' storage on this broker is recounted from the logs (retention and
# compaction shrink them; appends are added as they happen).
STORAGE_RECOUNT_SECONDS = 5.0

__all__ = ["Broker", "BrokerConfig"]


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.config = config
        self.store = store
        self.snapshot = MetadataSnapshot()
        # Versions and deltas (metadata_cache.py): a refresh reads only what changed.
        self.metadata = MetadataCache(full_refresh_seconds=config.metadata_full_refresh_seconds)
        self._storage_counted = -STORAGE_RECOUNT_SECONDS
        self.quotas = ByteRateQuotas()
        self.logs = LogManager(config.data_dir, self._config_for_topic)
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: set[Connection] = set()
        self._per_ip: Counter[str] = Counter()
        self._per_tenant: Counter[int] = Counter()
        self._auth_failures = FailureDelays(max_delay=config.failed_auth_max_delay_seconds)
        self.request_memory = MemoryPool(config.queued_max_request_bytes)
        self._refusals_logged: dict[tuple[str, str], float] = {}
        self._stopping = threading.Event()
        self._refresh_thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._refresh_lock = asyncio.Lock()
        # When the snapshot in use began to be read (monotonic): only a snapshot read after
        # a connection authenticated can say that connection's key is gone.
        self.snapshot_read_at = 0.0
        self._storage: dict[int, int] = {}
        self._producer_ids: tuple[int, int] = (0, 0)  # [next, end) of the claimed block
        self._producer_lock = asyncio.Lock()
        self.port = config.port
        self.groups = GroupCoordinator(store, self.call_store, config.groups)
        # KIP-848 groups share the classic coordinator's table, store and clock.
        self.consumer_groups = ConsumerGroupCoordinator(self.groups, config.consumer_groups)
        self.metrics = BrokerMetrics()
        self.client_versions = ClientVersions()
        self.usage = Meter(enabled=config.metering)
        self.replicas = ReplicaManager(
            config.replication(),
            self.logs,
            self.config_for,
            store,
            self.metrics,
            lambda: self.snapshot.brokers,
        )
        self.txn_markers = BrokerMarkerWriter(
            config.broker_id,
            lambda: self.snapshot,
            self.replicas,
            config.internal_password,
            self.refresh_metadata,
        )
        self.transactions = TransactionCoordinator(
            store,
            self.call_store,
            self.txn_markers,
            clock=lambda: int(time.time() * 1000),
            max_timeout_ms=config.transaction_max_timeout_ms,
            end_wait_s=END_TXN_WAIT_S,
        )
        # The finalized features' epoch: clients keep the features of the broker with the
        # highest (the start time: a restart with another level is seen as newer).
        self.features_epoch = int(time.time() * 1000)
        self.txn_router = TransactionRouter(
            config.broker_id,
            self.transaction_coordinator_for,
            self.transactions,
            config.internal_password,
        )
        # What handlers may use: narrow views of this broker and its services.
        self.services = Services(
            metadata=self,
            cluster=self,
            tenants=self,
            producer_ids=self,
            admin=store,
            replicas=self.replicas,
            groups=self.groups,
            consumer_groups=self.consumer_groups,
            quotas=self.quotas,
            metrics=self.metrics,
            transactions=self.transactions,
            usage=self.usage,
            consumer_protocol="consumer" in config.group_protocols,
            txn_router=self.txn_router,
        )
        self.metrics.info.labels(str(config.broker_id)).set(1)
        self.metrics.watch(self.gauge_state)
        self._tls_server: asyncio.base_events.Server | None = None
        self._heartbeat = Heartbeat(self._renew_lease, config.heartbeat_seconds)
        self.tls_port: int | None = None
        self._health: HealthServer | None = None
        self._ready = False
        self.shutting_down = False
        self._loop_seen = time.monotonic()
        # The metadata version whose roles and logs are applied (heartbeats report it).
        self.applied_version = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.replicas.open_logs()
        tls = self._tls_context()  # a bad certificate fails before anything is registered
        await self._register()
        await self.refresh_metadata()
        self._server = await asyncio.start_server(
            self._accept, self.config.host, self.config.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if tls is not None:
            self._tls_server = await asyncio.start_server(
                self._accept_tls,
                self.config.host,
                self.config.tls_port,
                ssl=tls,
                reuse_address=True,
            )
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        if self.config.port == 0 or self.config.tls_port == 0:
            await self._register()  # now with the ports the system picked
        if self.config.metrics_port is not None:
            metrics_host = self.config.metrics_host or self.config.host
            try:
                self._health = HealthServer(
                    self.metrics,
                    metrics_host,
                    self.config.metrics_port,
                    live=self._live,
                    ready=self._readiness,
                )
            except OSError as exc:
                # One line, and the broker serves Kafka without the endpoint.
                logger.warning(
                    "broker %s: no /metrics, /healthz or /readyz: %s:%s is not free (%s); "
                    "set MILLRACE_BROKER_METRICS_PORT to another port, 0 for any, or off",
                    self.config.broker_id,
                    metrics_host,
                    self.config.metrics_port,
                    exc.strerror,
                )
            else:
                self._health.start()
        self.logs.start(self.config.maintenance_seconds)
        self._refresh_thread = threading.Thread(
            target=self._watch_metadata, name="metadata-watch", daemon=True
        )
        self._refresh_thread.start()
        self._heartbeat.start()
        self._tasks = [
            asyncio.create_task(self._sweep_revoked()),
            asyncio.create_task(self.replicas.shrink_isr_loop()),
            asyncio.create_task(self.replicas.checkpoint_loop()),
            asyncio.create_task(self._loop_watch()),
            asyncio.create_task(self._report_clients_loop()),
            asyncio.create_task(self._report_usage_loop()),
            asyncio.create_task(self._transactions_loop()),
        ]
        self._ready = True
        logger.info(
            "broker %s listening on %s:%s%s",
            self.config.broker_id,
            self.config.host,
            self.port,
            f" (TLS on {self.tls_port})" if self.tls_port is not None else "",
        )

    async def _register(self) -> None:
        tls_host, tls_port = self.tls_endpoint()
        await self.call_store(
            self.store.register_broker,
            self.config.broker_id,
            self.advertised_host,
            self.advertised_port_or_bound(),
            self.config.rack,
            tls_host,
            tls_port,
        )

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.config.tls_port is None:
            return None
        if self.config.tls_cert_file is None or self.config.tls_key_file is None:
            raise ValueError("the TLS listener needs a certificate file and a key file")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.config.tls_cert_file, self.config.tls_key_file)
        return context

    def tls_endpoint(self) -> tuple[str | None, int | None]:
        """(host, port) clients should use for the TLS listener, or (None, None)."""
        if self.config.tls_port is None:
            return None, None
        port = self.config.tls_advertised_port or self.tls_port or self.config.tls_port
        return self.config.tls_advertised_host or self.advertised_host, port

    # --- health --------------------------------------------------------------------------

    async def _loop_watch(self) -> None:
        while True:
            self._loop_seen = time.monotonic()
            await asyncio.sleep(1.0)

    def _live(self) -> bool:
        """The event loop still runs its tasks (called from the health thread)."""
        return time.monotonic() - self._loop_seen < 15.0

    def _readiness(self) -> tuple[bool, str]:
        if self.shutting_down:
            return False, "shutting down"
        if not self._ready:
            return False, "starting"
        if self.config.broker_id not in self.snapshot.brokers:
            return False, "not (yet) a live broker in the metadata"
        behind = self.catching_up()
        if behind:
            # A rolling restart waits here: stopping the next broker now could leave
            # these partitions with fewer in-sync replicas than acks=all needs.
            return False, f"catching up: not yet in the ISR of {behind} partition(s)"
        return True, "ready"

    def catching_up(self) -> int:
        """Partitions with a leader that this broker replicates but is not in sync with."""
        me = self.config.broker_id
        return sum(
            1
            for topics in list(self.snapshot.topics.values())
            for topic in topics.values()
            for p in topic.partitions
            if me in p.replicas and me not in p.isr and p.leader is not None
        )

    def gauge_state(self) -> BrokerState:
        """What the scrape-time gauges report (read from the health thread: copies only)."""
        leaders = list(self.replicas.leaders.values())  # partitions led here
        names: dict[uuid.UUID, tuple[str, str]] = {}
        for tenant_id, topics in list(self.snapshot.topics.items()):
            tenant = self.snapshot.tenants.get(tenant_id)
            slug = tenant.slug if tenant is not None else str(tenant_id)
            for topic in topics.values():
                names[topic.topic_id] = (slug, topic.name)
        sizes: dict[tuple[str, str], int] = {}
        for tp in self.logs.partitions():
            log = self.logs.get(tp)
            name = names.get(tp.topic_id)
            if log is not None and name is not None:
                sizes[name] = sizes.get(name, 0) + log.size_bytes
        return BrokerState(
            connections=len(self._connections),
            partitions=len(self.logs.partitions()),
            leader_partitions=self._leading(),
            under_replicated=sum(1 for s in leaders if len(s.isr) < len(s.replicas)),
            under_min_isr=sum(1 for s in leaders if s.under_min_isr),
            log_sizes=[(t, n, size) for (t, n), size in sizes.items()],
        )

    async def controlled_shutdown(self) -> int:
        """Hand this broker's leaderships to other in-sync replicas before stopping.

        Heartbeats stop first (a heartbeat would mark the broker running again); the
        controller then moves every partition that has another live in-sync replica.
        Waits until this broker's metadata shows it leads none of them, or for
        ``controlled_shutdown_timeout_seconds``. Returns how many partitions it still
        leads (those whose only in-sync replica is this one).
        """
        self.shutting_down = True
        # Joined, so that no renewal still in flight marks the broker running again.
        await asyncio.to_thread(self._heartbeat.stop)
        deadline = time.monotonic() + self.config.controlled_shutdown_timeout_seconds
        outcome = "timed_out"
        failures = 0
        while True:
            # Asked again until it holds: a broker stopping at the same moment may have
            # handed this one a partition before it saw this one stop.
            try:
                remaining = await self.call_store(
                    self.store.controlled_shutdown, self.config.broker_id
                )
                await self.refresh_metadata()
            except Exception:
                failures += 1
                logger.warning("controlled shutdown request failed", exc_info=True)
                if failures >= 3:  # like controlled.shutdown.max.retries
                    outcome = "failed"
                    break
            else:
                if self._leading() <= remaining:
                    outcome = "done"
                    break
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.2)
        self.metrics.controlled_shutdowns.labels(outcome).inc()
        leading = self._leading()
        logger.info(
            "broker %s: controlled shutdown %s; still leading %s partition(s) with no other "
            "in-sync replica",
            self.config.broker_id,
            outcome.replace("_", " "),
            leading,
        )
        return leading

    def _leading(self) -> int:
        me = self.config.broker_id
        return sum(
            1
            for topics in self.snapshot.topics.values()
            for topic in topics.values()
            for p in topic.partitions
            if p.leader == me
        )

    async def stop(self, controlled: bool = True) -> None:
        """Graceful: hand over leaderships (``controlled``), stop accepting, finish
        in-flight requests, close logs cleanly."""
        if controlled and self._ready:
            with contextlib.suppress(Exception):
                await self.controlled_shutdown()
        self.shutting_down = True
        self._stopping.set()
        await asyncio.to_thread(self._heartbeat.stop)
        if self._server is not None:
            self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()
        for task in self._tasks:
            task.cancel()
        connections = list(self._connections)
        for conn in connections:
            conn.request_close()
        if connections:
            await asyncio.wait([c.task for c in connections if c.task], timeout=10)
        for server in (self._server, self._tls_server):
            if server is not None:
                with contextlib.suppress(Exception):
                    await server.wait_closed()
        if self._health is not None:
            self._health.stop()
        self.groups.close()
        self.consumer_groups.close()
        await asyncio.to_thread(self.txn_markers.close)
        await asyncio.to_thread(self.txn_router.close)
        await self.groups.flush()
        await self.consumer_groups.flush()
        with contextlib.suppress(Exception):  # the last counts: best effort, as on a crash
            await asyncio.wait_for(self.report_clients(), timeout=5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.report_usage(), timeout=5)
        await asyncio.to_thread(self.replicas.stop)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self.replicas.write_checkpoint)
        await asyncio.to_thread(self.logs.close_all)
        with contextlib.suppress(Exception):
            await self.call_store(self.store.deregister_broker, self.config.broker_id)
        logger.info("broker %s stopped", self.config.broker_id)

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def metrics_port(self) -> int | None:
        return self._health.port if self._health is not None else None

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host or self.config.host

    def advertised_port_or_bound(self) -> int:
        return self.config.advertised_port or self.port

    def coordinator_for(self, tenant_id: int, group_id: str) -> BrokerInfo | None:
        """The broker that coordinates a group: a stable hash over the live brokers.

        Every broker computes the same answer from the same snapshot; when brokers come or
        go the group moves, and its new coordinator rebuilds it from the store.
        """
        brokers = sorted(self.snapshot.brokers.values(), key=lambda b: b.id)
        if not brokers:
            return None
        index = zlib.crc32(f"{tenant_id}/{group_id}".encode()) % len(brokers)
        return brokers[index]

    def transaction_coordinator_for(
        self, tenant_id: int, transactional_id: str
    ) -> BrokerInfo | None:
        """The broker that coordinates a transactional id: placed as groups are, over a
        key of its own (a group and a transactional id of one name are unrelated)."""
        return self.coordinator_for(tenant_id, f"\x00txn\x00{transactional_id}")

    def owns_transaction(self, tenant_id: int, transactional_id: str) -> bool:
        owner = self.transaction_coordinator_for(tenant_id, transactional_id)
        return owner is not None and owner.id == self.config.broker_id

    def broker_metadata(self, tls: bool = False) -> dict[str, Any]:
        host, port = self.tls_endpoint() if tls else (None, None)
        return {
            "node_id": self.config.broker_id,
            "host": host or self.advertised_host,
            "port": port or self.advertised_port_or_bound(),
            "rack": self.config.rack,
        }

    def cluster_metadata(self, tls: bool = False) -> list[dict[str, Any]]:
        """Every live broker (this one as it advertises itself), for Metadata and friends.
        A client on the TLS listener gets the brokers' TLS addresses (brokers without
        one are left out, as Kafka leaves out brokers without the client's listener)."""
        me = self.broker_metadata(tls)
        others = [
            {"node_id": b.id, "host": host, "port": port, "rack": b.rack}
            for b in sorted(self.snapshot.brokers.values(), key=lambda b: b.id)
            if b.id != me["node_id"]
            for host, port in [b.endpoint(tls)]
            if port is not None
        ]
        return sorted([me, *others], key=lambda m: int(m["node_id"]))

    async def call_store(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call on a worker thread."""
        return await asyncio.to_thread(fn, *args)

    # --- metadata --------------------------------------------------------------------------

    def _watch_metadata(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stopping.is_set():
            try:
                self.store.wait_for_change(self.config.metadata_refresh_seconds)
                if self._stopping.is_set():
                    break
                asyncio.run_coroutine_threadsafe(self.refresh_metadata(), loop).result(30)
            except Exception:
                logger.exception("metadata refresh failed")
                time.sleep(1)

    async def refresh_metadata(self, *, full: bool = False) -> None:
        """Bring the metadata up to date (``metadata_cache``): nothing is read beyond the
        version and the live brokers when the version has not moved; otherwise only the
        changed topics and tenants. Roles and logs are then reconciled for what changed."""
        async with self._refresh_lock:
            started = time.monotonic()
            change = await self.call_store(
                functools.partial(self.metadata.refresh, full=full), self.store
            )
            if self.metadata.unassigned_topics:
                placed = await self.call_store(self.store.assign_unassigned_partitions)
                if placed:
                    change = _merged(
                        change, await self.call_store(self.metadata.refresh, self.store)
                    )
            # The version was read after ``started``, so active_keys is current as of then
            # even when nothing changed (the revocation sweep relies on it).
            self.snapshot_read_at = started
            snapshot = self.metadata.snapshot
            self.snapshot = snapshot
            # A whole snapshot, or a broker that came or went: every role is checked.
            topics = None if change.full or change.brokers else change.topics
            if topics is None or topics:
                self.replicas.apply(snapshot, topics)
            recount = started - self._storage_counted >= STORAGE_RECOUNT_SECONDS
            if topics is not None and change.tenants:
                # A tenant's settings changed (its plan's retention ceiling among them):
                # its open logs get their configs again.
                topics = topics | {
                    t.topic_id
                    for tenant_id in change.tenants
                    for t in snapshot.tenant_topics(tenant_id).values()
                }
            if topics is None or topics or recount:
                await asyncio.to_thread(self._reconcile_logs, snapshot, topics, recount)
            if change.full or any(t not in snapshot.tenants for t in change.tenants):
                self.groups.forget_tenants(snapshot.tenants)  # a deleted tenant's groups
                self.usage.forget_tenants(snapshot.tenants)
            self.applied_version = snapshot.version

    def _reconcile_logs(
        self,
        snapshot: MetadataSnapshot,
        topics: frozenset[uuid.UUID] | None = None,
        recount: bool = True,
    ) -> None:
        """Delete the logs of deleted partitions and of replicas moved away, give open logs
        their topic's config (``topics``: only those topics changed), and recount the
        tenants' storage on this broker (``recount``; appends add to it in between)."""
        me = self.config.broker_id
        held = self.logs.partitions()
        changed = held if topics is None else [tp for tp in held if tp.topic_id in topics]
        for tp in changed:
            topic = snapshot.topic_by_id(tp.topic_id)
            if topic is None or tp.partition >= topic.partition_count:
                self.logs.delete(tp)
                continue
            replicas = topic.partitions[tp.partition].replicas
            if replicas and me not in replicas and not self.replicas.holds_role(tp):
                # Reassigned away from this broker (``replicas.apply`` already stopped
                # following it): drop the copy.
                logger.info("dropping %s-%s: no longer a replica here", topic.name, tp.partition)
                self.logs.delete(tp)
                continue
            log = self.logs.get(tp)
            if log is not None:
                wanted = self.config_for(topic)
                if log.config != wanted:
                    log.config = wanted
        if not recount:
            return
        self._storage_counted = time.monotonic()
        storage: dict[int, int] = {}
        for tp in self.logs.partitions():
            topic = snapshot.topic_by_id(tp.topic_id)
            log = self.logs.get(tp)
            if topic is not None and log is not None:
                storage[topic.tenant_id] = storage.get(topic.tenant_id, 0) + log.size_bytes
        self._storage = storage

    def config_for(self, topic: TopicInfo) -> LogConfig:
        config = LogConfig.from_topic_configs(topic.configs, **self.config.extra_log_settings)
        tenant = self.snapshot.tenants.get(topic.tenant_id)
        return config.with_retention_ceiling(tenant.max_retention_ms if tenant else None)

    def _config_for_topic(self, topic_id: uuid.UUID) -> LogConfig:
        topic = self.snapshot.topic_by_id(topic_id)
        return self.config_for(topic) if topic else LogConfig()

    def snapshot_topic_by_id(self, tenant_id: int, topic_id: uuid.UUID) -> TopicInfo | None:
        topic = self.snapshot.topic_by_id(topic_id)
        return topic if topic is not None and topic.tenant_id == tenant_id else None

    # --- logs -------------------------------------------------------------------------------

    async def next_producer_id(self) -> int:
        async with self._producer_lock:
            nxt, end = self._producer_ids
            if nxt >= end:
                nxt = await self.call_store(self.store.allocate_producer_ids, PRODUCER_ID_BLOCK)
                end = nxt + PRODUCER_ID_BLOCK
            self._producer_ids = (nxt + 1, end)
            return nxt

    def tenant_storage(self, tenant_id: int) -> int:
        """Bytes of the tenant's partition logs on this broker."""
        return self._storage.get(tenant_id, 0)

    def add_storage(self, tenant_id: int, nbytes: int) -> None:
        self._storage[tenant_id] = self._storage.get(tenant_id, 0) + nbytes

    def tenant_suspended(self, tenant_id: int) -> str | None:
        tenant = self.snapshot.tenants.get(tenant_id)
        return tenant.suspension() if tenant is not None else None

    def tenant_over_storage(self, tenant_id: int) -> bool:
        tenant = self.snapshot.tenants.get(tenant_id)
        return tenant is not None and self._storage.get(tenant_id, 0) >= tenant.max_storage_bytes

    def default_partitions(self, tenant_id: int) -> int:
        """Partitions of a topic created without a count (Kafka's num.partitions): the
        tenant's own setting, else this deployment's."""
        tenant = self.snapshot.tenants.get(tenant_id)
        if tenant is not None and tenant.default_partitions:
            return tenant.default_partitions
        return self.config.default_partitions

    def tenant_rate(self, tenant_id: int, direction: str) -> int:
        tenant = self.snapshot.tenants.get(tenant_id)
        if tenant is None:
            return 0
        return tenant.produce_byte_rate if direction == "produce" else tenant.fetch_byte_rate

    # --- background ------------------------------------------------------------------------

    def _renew_lease(self) -> None:
        """Called on the heartbeat thread (``heartbeat.py``), never on the event loop."""
        self.store.heartbeat(self.config.broker_id, self.applied_version)

    async def _sweep_revoked(self) -> None:
        """Close connections whose API key was revoked, expired or deleted, and those of
        a suspended tenant once its grace period for reading is over."""
        while True:
            await asyncio.sleep(self.config.revocation_check_seconds)
            active, read_at = self.snapshot.active_keys, self.snapshot_read_at
            now_ms = int(time.time() * 1000)
            for conn in list(self._connections):
                principal = conn.principal
                if principal is None or principal.internal:
                    continue
                tenant = self.snapshot.tenants.get(principal.tenant_id)
                if tenant is not None and tenant.reads_over(now_ms):
                    logger.info(
                        "closing connection of suspended tenant %s (reads are over)",
                        tenant.slug,
                    )
                    conn.abort()
                    continue
                key = principal.key_id
                # A key created after the snapshot was read is not in it, and not revoked.
                if key is not None and key not in active and read_at > conn.authenticated_at:
                    logger.info("closing connection of revoked key %s", key)
                    conn.abort()

    # --- client versions ---------------------------------------------------------------------

    def _fold_uses(self, conn: Connection) -> None:
        """Move a connection's request counts into the broker's fold (client_versions)."""
        uses, since = conn.take_uses()
        if conn.principal is not None and uses:
            self.client_versions.add(conn.principal, conn.software, uses, since)

    async def report_clients(self) -> int:
        """Fold every connection's counts and hand them to the store; rows it could not
        take are kept for the next report. Returns how many rows were reported."""
        for conn in list(self._connections):
            self._fold_uses(conn)
        uses = self.client_versions.drain()
        if not uses:
            return 0
        try:
            await self.call_store(self.store.report_clients, self.config.broker_id, uses)
        except Exception:
            logger.warning(
                "reporting client versions failed; kept for the next report", exc_info=True
            )
            self.client_versions.restore(uses)
            return 0
        return len(uses)

    async def _transactions_loop(self) -> None:
        """Take over the unfinished transactions of the ids placed here (finishing the
        decided ones, timing out the rest), drop what is held of ids placed elsewhere,
        and abort transactions open longer than their timeout."""
        while True:
            try:
                await self.adopt_transactions()
                await self.transactions.abort_expired()
            except Exception:
                logger.warning("transaction coordinator check failed", exc_info=True)
            await asyncio.sleep(self.config.transaction_abort_check_seconds)

    async def adopt_transactions(self) -> None:
        self.transactions.forget(self.owns_transaction)
        unfinished = await self.call_store(self.store.unfinished_transactions)
        for txn in unfinished:
            if self.owns_transaction(txn.tenant_id, txn.transactional_id):
                await self.transactions.load(txn.tenant_id, txn.transactional_id)

    async def _report_clients_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.client_report_seconds)
            await self.report_clients()

    # --- usage metering ------------------------------------------------------------------------

    def led_partitions(self) -> list[LedPartition]:
        """The partitions this broker leads, with their log sizes (the storage sample)."""
        led = []
        for tp in list(self.replicas.leaders):
            topic = self.snapshot.topic_by_id(tp.topic_id)
            log = self.logs.get(tp)
            if topic is not None and log is not None and not log.closed:
                led.append(
                    LedPartition(topic.tenant_id, topic.topic_id, topic.name, log.size_bytes)
                )
        return led

    async def report_usage(self) -> int:
        """Sample storage, then hand the changed usage rows to the store; rows the store
        did not take go again with the next report. Returns how many were reported."""
        self.usage.sample(self.led_partitions())
        report = self.usage.report()
        if report is None:
            return 0
        try:
            await self.call_store(self.store.report_usage, self.config.broker_id, report)
        except Exception:
            logger.warning("reporting usage failed; kept for the next report", exc_info=True)
            return 0
        self.usage.acknowledge(report)
        return len(report.rows)

    async def _report_usage_loop(self) -> None:
        self.usage.sample(())  # starts the storage clock
        while True:
            await asyncio.sleep(self.config.usage_report_seconds)
            await self.report_usage()

    # --- connections -------------------------------------------------------------------------

    async def _accept_tls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._accept(reader, writer, tls=True)

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tls: bool = False
    ) -> None:
        conn = Connection(self, reader, writer, tls=tls)
        limit = self.config.max_connections_per_ip
        if limit and self._per_ip[conn.host] >= limit:
            self._refuse_connection(conn, f"{limit} connections from this address already")
            return
        self.metrics.connections_created.labels("tls" if tls else "plain").inc()
        conn.task = asyncio.current_task()
        self._connections.add(conn)
        self._per_ip[conn.host] += 1
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)
            self._fold_uses(conn)
            self._per_ip[conn.host] -= 1
            if self._per_ip[conn.host] <= 0:
                del self._per_ip[conn.host]
            if conn.counted_tenant is not None:
                self._per_tenant[conn.counted_tenant] -= 1

    def _refuse_connection(self, conn: Connection, why: str) -> None:
        key = ("ip", conn.host)
        now = time.monotonic()
        if now - self._refusals_logged.get(key, 0.0) > 60:  # once a minute per address
            self._refusals_logged[key] = now
            logger.warning("refusing connections from %s: %s", conn.host, why)
        self.metrics.connections_refused.inc()
        conn.writer.transport.abort()

    def admit_tenant(self, tenant_id: int) -> bool:
        """Count one more authenticated connection of ``tenant_id``; False over its limit
        (the broker's ``max_connections_per_tenant`` or the tenant's plan, the lower)."""
        limits = [self.config.max_connections_per_tenant]
        tenant = self.snapshot.tenants.get(tenant_id)
        if tenant is not None:
            limits.append(tenant.max_connections)
        limit = min((n for n in limits if n), default=0)
        if limit and self._per_tenant[tenant_id] >= limit:
            return False
        self._per_tenant[tenant_id] += 1
        return True

    def auth_failure_delay(self, host: str) -> float:
        """Seconds to hold back a failed login from ``host`` (``limits.FailureDelays``)."""
        return self._auth_failures.failed(host)


def _merged(first: Refresh, then: Refresh) -> Refresh:
    """What two refreshes in a row changed together."""
    return Refresh(
        full=first.full or then.full,
        topics=first.topics | then.topics,
        tenants=first.tenants | then.tenants,
        brokers=first.brokers or then.brokers,
        keys=first.keys or then.keys,
    )
