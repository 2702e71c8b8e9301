"""``manage.py up``: every Millrace process in one command, for a first run.

Starts the web app (daphne on the ASGI app), the Celery worker and beat, a broker and the
Connect fleet (every tenant's connectors) as child processes, creates the first admin and
the ``default`` tenant (printing the admin's password once, when it is created), and on
Ctrl-C or SIGTERM stops the children with SIGTERM, waiting for each to finish cleanly
before exiting.

A child that dies is started again, after a pause that doubles with each quick failure
(1 s up to 30 s; a child that ran for a minute starts over at 1 s), and both the exit
and the restart are logged: one failing part no longer stops the others. The ports are
checked before anything starts, so a readiness probe never reaches some other program.

The children's output passes through this process line by line, so the banner (URLs,
listeners, the first admin's password) comes last, once every child has said it is ready
(or after a minute, whatever is missing), rather than lost among their start-up lines.

The broker's listener takes SASL (an API key) and, unless ``--no-dev-listener`` is given or
``MILLRACE_DEV_LISTENER=off`` is set, also clients without credentials, who act as the
``default`` tenant: the *development listener*, named so in the banner and on the console's
cluster page.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from control_plane.tenancy.bootstrap import ensure_first_admin

STOP_TIMEOUT_SECONDS = 15
MAX_RESTART_DELAY_SECONDS = 30.0
STABLE_SECONDS = 60.0  # a child that ran this long has its backoff reset
WEB_DATABASE_POOL_SIZE = os.environ.get("DATABASE_POOL_SIZE") or "20"
READY_TIMEOUT_SECONDS = 60.0
OFF = {"0", "off", "false", "no"}


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float | None = None  # set while waiting to start it again
    failures: int = 0  # quick failures in a row: the backoff's exponent
    restarts: int = 0
    # A line the child prints once it is ready (the web app is asked on /readyz instead).
    ready_text: str | None = None
    ready: threading.Event = field(default_factory=threading.Event)


class Command(BaseCommand):
    help = "Run the web app, Celery worker and beat together (embedded defaults unless configured)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="web listen address")
        parser.add_argument("--port", type=int, default=8000, help="web listen port")
        parser.add_argument("--no-migrate", action="store_true", help="skip migrate")
        parser.add_argument(
            "--broker-port", type=int, default=9092, help="Kafka listener of the broker (127.0.0.1)"
        )
        parser.add_argument(
            "--no-dev-listener",
            action="store_true",
            help="the broker refuses clients without credentials (also MILLRACE_DEV_LISTENER=off)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._check_ports_free(
            [
                (options["host"], options["port"], "--port"),
                ("127.0.0.1", options["broker_port"], "--broker-port"),
            ]
        )
        if not options["no_migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        boot = ensure_first_admin()
        self._broker_port = options["broker_port"]
        self._dev_listener = not options["no_dev_listener"] and (
            os.environ.get("MILLRACE_DEV_LISTENER", "on").strip().lower() not in OFF
        )
        self._output = threading.Lock()
        children = self._children(options["host"], options["port"], options["broker_port"])
        stopping = False

        def request_stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        for child in children:
            self._start(child)
        url = f"http://{options['host']}:{options['port']}/"
        web = children[0]
        if self._wait_ready(url + "readyz", web, lambda: stopping):
            self._wait_for_children(children, lambda: stopping)
            self._banner(url, boot)
        while not stopping:
            self._supervise(children)
            time.sleep(0.2)
        self._stop(children)
        self.stdout.write("Millrace stopped.")

    def _check_ports_free(self, ports: list[tuple[str, int, str]]) -> None:
        for host, port, option in ports:
            if port == 0:
                continue
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((host, port))
                except OSError as exc:
                    raise CommandError(
                        f"{host}:{port} is already in use ({exc.strerror}): another Millrace "
                        f"or another program is listening there; stop it or choose another "
                        f"port with {option}"
                    ) from None

    def _start(self, child: Child) -> None:
        # Own session: a terminal's Ctrl-C reaches only us, and we stop children in order.
        env = {**(child.env or os.environ), "PYTHONUNBUFFERED": "1"}
        child.process = subprocess.Popen(  # noqa: S603 - our own command lines
            child.argv,
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for source, target in (
            (child.process.stdout, sys.stdout.buffer),
            (child.process.stderr, sys.stderr.buffer),
        ):
            threading.Thread(target=self._relay, args=(child, source, target), daemon=True).start()
        child.started = time.monotonic()
        child.restart_at = None

    def _relay(self, child: Child, source: IO[bytes] | None, target: IO[bytes]) -> None:
        """Copy a child's output to ours a line at a time, noting its ready line."""
        if source is None:
            return
        marker = child.ready_text.encode() if child.ready_text else None
        for line in iter(source.readline, b""):
            with self._output:
                target.write(line)
                target.flush()
            if marker is not None and marker in line:
                child.ready.set()
        source.close()

    def _wait_for_children(self, children: list[Child], stopping: Any) -> None:
        """Until every child printed its ready line (at most READY_TIMEOUT_SECONDS)."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        waiting = [c for c in children if c.ready_text]
        while waiting and time.monotonic() < deadline and not stopping():
            waiting = [c for c in waiting if not c.ready.is_set()]
            time.sleep(0.1)
        for child in waiting:
            self._log(f"{child.name} has not said it is ready yet; carrying on", error=True)

    def _supervise(self, children: list[Child]) -> None:
        """Start again, with backoff, each child that has exited."""
        now = time.monotonic()
        for child in children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._start(child)
                    assert child.process is not None
                    self._log(f"{child.name} restarted (pid {child.process.pid})")
                continue
            code = child.process.poll() if child.process is not None else None
            if code is None:
                continue
            if now - child.started >= STABLE_SECONDS:
                child.failures = 0
            child.failures += 1
            delay = min(MAX_RESTART_DELAY_SECONDS, 2.0 ** (child.failures - 1))
            child.restarts += 1
            child.restart_at = now + delay
            self._log(
                f"{child.name} exited with code {code}; restarting it in {delay:g} s "
                f"(restart {child.restarts})",
                error=True,
            )

    def _log(self, message: str, error: bool = False) -> None:
        stream = self.stderr if error else self.stdout
        with self._output:
            stream.write(f"millrace up: {message}")
            stream.flush()

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
                    "--quiet",  # no start-up banner: `up` prints what a person needs
                    "worker",
                    "--pool=solo",
                    "--loglevel=INFO",
                    # One local worker: no peers to gossip or synchronise with, and no
                    # event traffic through the queue folder.
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-Q",
                    settings.CELERY_TASK_DEFAULT_QUEUE,
                    "--hostname",
                    f"worker-{os.getpid()}@%h",
                ],
                ready_text=" ready.",
            ),
            Child(
                "beat",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "control_plane",
                    "--quiet",
                    "beat",
                    "--loglevel=INFO",
                    "--schedule",
                    str(schedule),
                ],
                ready_text="beat: Starting",
            ),
            # With the development listener, clients without credentials act as the
            # `default` tenant.
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
                    *(["--allow-anonymous"] if self._dev_listener else []),
                ],
                ready_text=" ready on ",
            ),
            # The platform's Connect fleet: a connector created in the console or over the
            # REST API runs without a worker of the tenant's own.
            Child(
                "connect",
                [python, "manage.py", "connect", "--fleet"],
                ready_text="connect fleet ready",
            ),
        ]

    def _wait_ready(self, url: str, web: Child, stopping: Any) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stopping():
            if web.process is None or web.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
                    # Ours: the ports were free before the web app started, and it still runs.
                    if response.status == 200 and web.process.poll() is None:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        return False

    def _banner(self, url: str, boot: Any) -> None:
        kafka = f"127.0.0.1:{self._broker_port}"
        lines = [
            f"Millrace is up: {url}  (API docs: {url}api/docs/)",
            f"Kafka: {kafka}  SASL_PLAINTEXT with an API key (SCRAM-SHA-256/512 or PLAIN); "
            f"create one in the console, which shows the client settings to copy",
        ]
        if self._dev_listener:
            lines.append(
                f"Development listener: {kafka} also takes clients without credentials, as "
                f"tenant 'default' (try: kcat -b {kafka} -L); turn it off with "
                "--no-dev-listener or MILLRACE_DEV_LISTENER=off"
            )
        if boot.password:
            lines.append(
                f"First admin created. Username: {boot.username}  Password: {boot.password}"
            )
            lines.append(
                "This password is shown only once; set a new one with "
                "`python manage.py changepassword admin` (or under /admin/)."
            )
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
