"""What the benchmarks share: processes on loopback, throwaway metadata stores, output.

Every benchmark prints JSON lines (:func:`emit`) and starts what it measures as child
processes of its own (``manage.py broker``, daphne) on 127.0.0.1, each stopped again on
the way out (:func:`stop_process`); a throwaway Postgres database is dropped at the end.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def emit(name: str, **fields: Any) -> None:
    print(json.dumps({"workload": name, **fields}), flush=True)


def run_python(env: dict[str, str], *args: str) -> str:
    """Run ``python ARGS`` in the repository with ``env`` to completion; its standard output."""
    result = subprocess.run(  # noqa: S603 - our own command line
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return result.stdout.decode()


def manage(env: dict[str, str], *args: str) -> str:
    """Run one ``manage.py`` command to completion; its standard output."""
    return run_python(env, "manage.py", *args)


def run_step(env: dict[str, str], module: str, *args: str) -> dict[str, Any]:
    """Run a step inside Django (``python -m MODULE ARGS``: :mod:`bench.store`,
    :mod:`bench.console_setup`) against the store ``env`` names; the JSON line it answers."""
    lines = run_python(env, "-m", module, *args).splitlines()
    found: dict[str, Any] = json.loads(next(line for line in lines if line.startswith("{")))
    return found


def bench_env(work: Path, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a bench broker: embedded metadata unless ``extra_env`` says else."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(MILLRACE_DATA_DIR=str(work / "data"), PYTHONUNBUFFERED="1")
    env.update(extra_env or {})
    return env


@contextlib.contextmanager
def metadata_database(choice: str, name: str) -> Iterator[str | None]:
    """A fresh Postgres database ``name`` (its URL), dropped at the end; None: SQLite.

    The server is the one of ``DATABASE_URL`` (or 127.0.0.1:5432 as ``postgres``).
    ``choice`` "auto" falls back to SQLite when no Postgres answers, "postgres" raises.
    """
    if choice == "sqlite":
        yield None
        return
    import psycopg
    from psycopg import sql

    server = urlsplit(os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES)
    database = sql.Identifier(name)
    admin_url = server._replace(path="/postgres").geturl()
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(database))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(database))
    except psycopg.OperationalError as exc:
        if choice == "postgres":
            raise
        print(f"no Postgres at {server.netloc} ({exc}); using SQLite", file=sys.stderr)
        yield None
        return
    try:
        yield server._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))


def prepare_store(env: dict[str, str]) -> None:
    """Migrate the metadata store and raise the default tenant's quotas."""
    manage(env, "migrate", "-v0")
    run_step(env, "bench.store", "prepare")


def start_broker(
    env: dict[str, str],
    *,
    port: int,
    data_dir: Path,
    log_path: Path,
    broker_id: int | None = None,
    cpu: str | None = None,
    anonymous: bool = True,
) -> subprocess.Popen[bytes]:
    """Run ``manage.py broker`` on loopback; return once it is ready.

    The log is appended to ``log_path``; only this start's "ready on" line counts. Pinned
    to ``cpu`` with taskset if given. Stopped again if it does not come up within 60 s.
    ``anonymous``: the development listener, which takes unauthenticated clients as the
    default tenant (and then refuses SASL on the same connection); else SASL only.
    """
    seen = log_path.stat().st_size if log_path.exists() else 0
    pin = [shutil.which("taskset") or "/usr/bin/taskset", "-c", cpu] if cpu else []
    ident = ["--id", str(broker_id)] if broker_id is not None else []
    with open(log_path, "ab") as log:
        broker = subprocess.Popen(  # noqa: S603 - our own command line
            [
                *pin,
                sys.executable,
                "manage.py",
                "broker",
                *ident,
                "--port",
                str(port),
                *(["--allow-anonymous"] if anonymous else []),
                "--data-dir",
                str(data_dir),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while "ready on" not in log_path.read_bytes()[seen:].decode(errors="replace"):
        if broker.poll() is not None or time.monotonic() > deadline:
            stop_process(broker)
            raise RuntimeError(log_path.read_text(errors="replace")[-2000:])
        time.sleep(0.2)
    return broker


def stop_process(process: subprocess.Popen[bytes], grace: float = 60) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextlib.contextmanager
def bench_broker(
    work: Path, extra_env: Mapping[str, str] | None = None, cpu: str | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Migrate, raise the default tenant's quotas, and run ``manage.py broker`` on loopback.

    Yields (port, process); the broker (pinned to ``cpu`` with taskset if given) is
    stopped on exit. Its log is ``work / "broker.log"``.
    """
    env = bench_env(work, extra_env)
    prepare_store(env)
    port = free_port()
    broker = start_broker(
        env, port=port, data_dir=work / "broker", log_path=work / "broker.log", cpu=cpu
    )
    try:
        yield port, broker
    finally:
        stop_process(broker)


SARAMA_SOURCE = Path(__file__).resolve().parents[1] / "tests" / "clients" / "sarama"
GOPATH = Path("/usr/share/gocode")  # Debian's Go library packages


def sarama_scenario(out: Path) -> Path | None:
    """The Sarama client scenario (``tests/clients/sarama``) built offline against
    Debian's golang-github-shopify-sarama-dev in GOPATH mode, into ``out``; None without
    Go or that package."""
    go = shutil.which("go")
    if go is None or not (GOPATH / "src" / "github.com" / "Shopify" / "sarama").is_dir():
        return None
    env = {
        **os.environ,
        "GOPATH": str(GOPATH),
        "GO111MODULE": "off",
        "GOCACHE": str(out / "cache"),
        "GOFLAGS": "",
    }
    subprocess.run(  # noqa: S603 - our own command line
        [go, "build", "-o", str(out / "scenario"), "."],
        cwd=SARAMA_SOURCE,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out / "scenario"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


@contextlib.contextmanager
def sasl_broker(
    name: str, work: Path, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[dict[str, str], dict[str, str], int]]:
    """(env, an API key that may do anything, port) of one SASL-only broker on loopback,
    on a throwaway Postgres database ``name`` (dropped at the end; default tenant's quotas
    raised). The broker stops when the block ends."""
    with metadata_database("postgres", name) as url:
        assert url is not None
        env = bench_env(
            work,
            {
                "DATABASE_URL": url,
                "MILLRACE_DEFAULT_REPLICATION_FACTOR": "1",
                "DJANGO_LOG_LEVEL": "WARNING",
                **(extra_env or {}),
            },
        )
        prepare_store(env)
        key = run_step(env, "bench.store", "credentials", "bench-replication")
        port = free_port()
        broker = start_broker(
            env,
            port=port,
            data_dir=work / "broker",
            log_path=work / "broker.log",
            broker_id=1,
            anonymous=False,
        )
        try:
            yield env, key, port
        finally:
            stop_process(broker)


def start_web(env: dict[str, str], port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """daphne serving ``control_plane.asgi`` on 127.0.0.1:``port``, once /readyz answers."""
    with open(log_path, "ab") as log:
        web = subprocess.Popen(  # noqa: S603 - our own command line
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "control_plane.asgi:application",
            ],
            cwd=ROOT,
            # The web role as deployed (docker/entrypoint.sh): DEBUG off, pooled connections.
            env={**env, "DEBUG": "0", "DATABASE_POOL_SIZE": "20"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return web
        except OSError:
            pass
        if web.poll() is not None:
            break
        time.sleep(0.3)
    stop_process(web)
    raise RuntimeError(log_path.read_text(errors="replace")[-2000:])
