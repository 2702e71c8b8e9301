"""``manage.py connect [--standalone] worker.properties [connector.properties ...]``: a
Connect worker (Step 14). ``manage.py connect --fleet [worker.properties]``: the
platform's fleet, running every tenant's Connect cluster (``data_plane.connect.fleet``;
the properties, optional, add worker settings such as timeouts and converters).

Distributed mode (the default) joins the Connect cluster named by the worker config's
``group.id`` and shares its connectors with the other workers; their configs, offsets
and statuses live in the cluster's topics (``config.storage.topic`` etc.), created on
first start.

Standalone mode runs the connectors of the given config files (Java properties, or JSON
as ``{"name": ..., "config": {...}}``) in this process and keeps source offsets in the
worker's ``offset.storage.file.filename``, as Kafka's ``connect-standalone``. The worker
reaches the brokers with the client settings in its worker config (a service account's
key: ``sasl.username``/``sasl.password``, or Java's ``sasl.jaas.config``). SIGTERM or
SIGINT stops the connectors, committing what was delivered. docs/connect.md.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from data_plane.connect.config import ConfigException
from data_plane.connect.distributed import DistributedHerder
from data_plane.connect.fleet import Fleet
from data_plane.connect.metrics import WORKER_METRICS
from data_plane.connect.properties import load_config
from data_plane.connect.standalone import StandaloneWorker
from data_plane.connect.tasks import WORKER_CONFIG

logger = logging.getLogger("millrace.connect")


def tune_gc() -> None:
    """What was loaded at start-up (Django, the connectors) is left out of the cyclic
    collector's passes, and young collections run less often: a task makes and drops
    tens of objects per record, and every full pass otherwise walks the whole heap."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def wait_for_a_broker(stop: threading.Event, timeout: float = 120.0) -> None:
    """Until a broker has registered (started together, the fleet may come up first)."""
    import time

    from control_plane.streams.kafka import Unavailable, bootstrap_servers

    deadline = time.monotonic() + timeout
    while not stop.is_set():
        try:
            bootstrap_servers()
            return
        except Unavailable:
            if time.monotonic() > deadline:
                raise CommandError(f"no broker registered in {timeout:.0f} s") from None
            stop.wait(1.0)
    raise SystemExit(0)  # asked to stop before a broker came


class Command(BaseCommand):
    help = "Run a Connect worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--standalone",
            action="store_true",
            help="one process; connectors from the files given",
        )
        parser.add_argument(
            "--fleet",
            action="store_true",
            help="the platform's fleet: every tenant's Connect cluster (worker config optional)",
        )
        parser.add_argument("worker_config", nargs="?", help="the worker's properties file")
        parser.add_argument("connector_configs", nargs="*", help="connector configs")

    def handle(self, *args: Any, **options: Any) -> None:
        tune_gc()
        if options["fleet"]:
            self._fleet(options)
            return
        if not options["worker_config"]:
            raise CommandError("the worker's properties file is required (or --fleet)")
        if not options["standalone"]:
            self._distributed(options)
            return
        try:
            worker_config = load_config(Path(options["worker_config"]))
            connectors = [load_config(Path(p)) for p in options["connector_configs"]]
            worker = StandaloneWorker(worker_config, connectors)
        except (OSError, ValueError) as exc:  # ConfigException is a ValueError
            raise CommandError(str(exc)) from exc
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            worker.start()
        except ConfigException as exc:
            worker.stop()
            raise CommandError(str(exc)) from exc
        self._metrics(worker_config)
        self.stdout.write(f"connect worker ready ({len(connectors)} connectors)")
        self.stdout.flush()
        try:
            stop.wait()
        finally:
            worker.stop()
            self.stdout.write("connect worker stopped")

    def _metrics(self, worker_config: dict[str, str]) -> None:
        """Serve the worker's Prometheus metrics if its config sets ``metrics.port``."""
        parsed = WORKER_CONFIG.parse(worker_config)
        if parsed["metrics.port"] is None:
            return
        try:
            server = WORKER_METRICS.serve(parsed["metrics.host"], parsed["metrics.port"])
        except OSError as exc:
            raise CommandError(
                f"metrics.port: {parsed['metrics.host']}:{parsed['metrics.port']} is not free "
                f"({exc.strerror})"
            ) from exc
        host, port = server.server_address[:2]
        self.stdout.write(f"connect metrics on http://{host}:{port}/metrics")

    def _fleet(self, options: dict[str, Any]) -> None:
        from control_plane.connect.fleet import fleet_base, key_error, tenants_using_connect

        if options["standalone"] or options["connector_configs"]:
            raise CommandError("--fleet takes at most a worker properties file")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            extra = load_config(Path(options["worker_config"])) if options["worker_config"] else {}
            if not extra.get("bootstrap.servers"):
                wait_for_a_broker(stop)
            fleet = Fleet(fleet_base(extra), tenants_using_connect, key_error,
                          interval=float(extra.get("fleet.interval.seconds", 5)))  # fmt: skip
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        runner = threading.Thread(target=fleet.run, args=(stop,), name="fleet")
        runner.start()
        if extra.get("metrics.port"):
            self._metrics({**extra, "bootstrap.servers": fleet.base["bootstrap.servers"]})
        self.stdout.write("connect fleet ready")
        self.stdout.flush()
        while runner.is_alive():
            runner.join(0.5)
        self.stdout.write("connect fleet stopped")

    def _distributed(self, options: dict[str, Any]) -> None:
        if options["connector_configs"]:
            raise CommandError(
                "a distributed worker takes connectors from its cluster's config topic, "
                "not from files (use --standalone for that)"
            )
        try:
            worker_config = load_config(Path(options["worker_config"]))
            herder = DistributedHerder(worker_config)
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        runner = threading.Thread(target=herder.run, args=(stop,), name="herder")
        runner.start()
        while not herder.ready.wait(0.2):
            if not runner.is_alive():
                raise CommandError("the worker stopped before it joined its cluster")
        self._metrics(worker_config)
        self.stdout.write(
            f"connect worker {herder.worker_id} ready in cluster {herder.config['group.id']}"
        )
        self.stdout.flush()
        while runner.is_alive():
            runner.join(0.5)
        self.stdout.write("connect worker stopped")
