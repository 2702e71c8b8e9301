"""``manage.py up``: every Millrace process in one command, for a first run.

Starts the web app (daphne on the ASGI app), the Celery worker and beat as child
processes, creates the first admin and the ``default`` tenant (printing the admin's
password once, when it is created), and on Ctrl-C or SIGTERM stops the children with
SIGTERM, waiting for each to finish cleanly before exiting. If any child dies, the rest
are stopped and ``up`` exits non-zero. Brokers join this list in Step 3.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from control_plane.core.bootstrap import ensure_first_admin

STOP_TIMEOUT_SECONDS = 15
WEB_DATABASE_POOL_SIZE = os.environ.get("DATABASE_POOL_SIZE") or "20"


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None


class Command(BaseCommand):
    help = "Run the web app, Celery worker and beat together (embedded defaults unless configured)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="web listen address")
        parser.add_argument("--port", type=int, default=8000, help="web listen port")
        parser.add_argument("--no-migrate", action="store_true", help="skip migrate")
        parser.add_argument(
            "--broker-port", type=int, default=9092, help="Kafka listener of the broker (127.0.0.1)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["no_migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        boot = ensure_first_admin()
        self._broker_port = options["broker_port"]
        children = self._children(options["host"], options["port"], options["broker_port"])
        stopping = False

        def request_stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        for child in children:
            # Own session: a terminal's Ctrl-C reaches only us, and we stop children in order.
            child.process = subprocess.Popen(  # noqa: S603 - our own command lines
                child.argv, env=child.env, start_new_session=True
            )
        url = f"http://{options['host']}:{options['port']}/"
        ready = self._wait_ready(url + "readyz", children, lambda: stopping)
        if ready:
            self._banner(url, boot)
        failed = None
        while not stopping and failed is None:
            failed = next((c for c in children if c.process and c.process.poll() is not None), None)
            time.sleep(0.2)
        self._stop(children)
        if failed is not None:
            raise CommandError(
                f"{failed.name} exited with code {failed.process.returncode}; stopped the rest"
            )
        self.stdout.write("Millrace stopped.")

    def _children(self, host: str, port: int, broker_port: int) -> list[Child]:
        python = sys.executable
        schedule = Path(settings.CELERY_BEAT_SCHEDULE_FILENAME)
        schedule.parent.mkdir(parents=True, exist_ok=True)
        return [
            Child(
                "web",
                [
                    python,
                    "-m",
                    "daphne",
                    "-b",
                    host,
                    "-p",
                    str(port),
                    "control_plane.asgi:application",
                ],
                # With Postgres: a connection pool (daphne runs each request in a new thread).
                env={**os.environ, "DATABASE_POOL_SIZE": WEB_DATABASE_POOL_SIZE},
            ),
            Child(
                "worker",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "control_plane",
                    "worker",
                    "--pool=solo",
                    "--loglevel=INFO",
                    "-Q",
                    settings.CELERY_TASK_DEFAULT_QUEUE,
                    "--hostname",
                    f"worker-{os.getpid()}@%h",
                ],
            ),
            Child(
                "beat",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "control_plane",
                    "beat",
                    "--loglevel=INFO",
                    "--schedule",
                    str(schedule),
                ],
            ),
            # Development listener: unauthenticated clients act as the `default` tenant.
            Child(
                "broker",
                [
                    python,
                    "manage.py",
                    "broker",
                    "--id",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(broker_port),
                    "--allow-anonymous",
                ],
            ),
        ]

    def _wait_ready(self, url: str, children: list[Child], stopping: Any) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stopping():
            if any(c.process and c.process.poll() is not None for c in children):
                return False
            try:
                with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        return False

    def _banner(self, url: str, boot: Any) -> None:
        lines = [
            f"Millrace is up: {url}  (API docs: {url}api/docs/)",
            f"Kafka: 127.0.0.1:{self._broker_port}  "
            f"(try: kcat -b 127.0.0.1:{self._broker_port} -L)",
        ]
        if boot.password:
            lines.append(
                f"First admin created. Username: {boot.username}  Password: {boot.password}"
            )
            lines.append("This password is shown only once; change it under /admin/.")
        if boot.tenant_created:
            lines.append(f"Tenant '{boot.tenant_slug}' created, owned by {boot.username}.")
        lines.append("Press Ctrl-C to stop.")
        self.stdout.write(self.style.SUCCESS("\n".join(lines)))
        self.stdout.flush()

    def _stop(self, children: list[Child]) -> None:
        running = [c for c in children if c.process and c.process.poll() is None]
        for child in running:
            child.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for child in running:
            assert child.process is not None
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{child.name} did not stop in time; killing it")
                child.process.kill()
                child.process.wait()
