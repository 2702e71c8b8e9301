#!/usr/bin/env bash
# Start one Millrace role in this container; the first argument names it.
#   web        daphne serving the ASGI app on 0.0.0.0:8000 (console, admin API, /healthz)
#   broker     one Kafka-protocol broker (9092; 9093 with TLS; 9644 metrics and probes)
#   worker     a Celery worker on the millrace queue (9809 metrics)
#   beat       the Celery beat scheduler (schedule file in $MILLRACE_DATA_DIR); run exactly one
#   migrate    apply database migrations, then exit
#   connect    a distributed Connect worker (manage.py connect) of the Connect cluster its
#              worker config names (9810 metrics). The config is $MILLRACE_CONNECT_CONFIG
#              (default /etc/millrace/connect/worker.properties), or one written from the
#              MILLRACE_CONNECT_* variables into a private temporary file (docs/deploy.md)
#   connect-fleet  the platform's Connect fleet (manage.py connect --fleet): every tenant's
#              Connect cluster, each connector as the API key its config names; needs the
#              database and MILLRACE_INTERNAL_SECRET like the web role
#   healthcheck [web|broker|connect]
#              exit 0 when the role answers (web: /healthz on port 8000; broker: /healthz on
#              its metrics port; connect: /metrics on its metrics port); used by the image's
#              HEALTHCHECK and by compose
# Anything else is executed as given, e.g. `python manage.py createsuperuser`.
# Extra arguments after a role name are passed on to its command.
set -euo pipefail

# The Connect worker's config, shared by the connect role and `healthcheck connect`:
#   connect_config config       print the path of the worker config to run with
#   connect_config healthcheck  exit 0 when the worker's metrics port answers /metrics
# The worker config is $MILLRACE_CONNECT_CONFIG when that file exists. Otherwise it is written
# from MILLRACE_CONNECT_BOOTSTRAP_SERVERS, _USERNAME and _PASSWORD (a service account's API
# key: its id and secret) and the optional variables below, into a new file that only this
# user can read; the secret is never printed. Either way the worker serves /metrics on
# MILLRACE_CONNECT_METRICS_PORT (default: the file's metrics.port, else 9810) and
# MILLRACE_CONNECT_METRICS_HOST (default: the file's metrics.host, else 0.0.0.0): when the file
# lacks them, or the variables say otherwise, a private copy of it gets them (later keys win).
connect_config() {
    python - "$@" <<'PY'
import os
import sys
import tempfile
import urllib.request

from data_plane.connect.properties import parse_properties

DEFAULT_CONFIG = "/etc/millrace/connect/worker.properties"
DEFAULT_METRICS_PORT = "9810"
CREDENTIALS = (
    "MILLRACE_CONNECT_BOOTSTRAP_SERVERS",
    "MILLRACE_CONNECT_USERNAME",
    "MILLRACE_CONNECT_PASSWORD",
)
# worker config key -> (variable, default), written when there is no config file.
FROM_ENV = {
    "bootstrap.servers": ("MILLRACE_CONNECT_BOOTSTRAP_SERVERS", None),
    "security.protocol": ("MILLRACE_CONNECT_SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
    "sasl.mechanism": ("MILLRACE_CONNECT_SASL_MECHANISM", "SCRAM-SHA-256"),
    "sasl.username": ("MILLRACE_CONNECT_USERNAME", None),
    "sasl.password": ("MILLRACE_CONNECT_PASSWORD", None),
    # The tenant's own Connect cluster, the one its REST API (/api/v1/tenants/<t>/connect/)
    # manages.
    "group.id": ("MILLRACE_CONNECT_GROUP_ID", "connect-cluster"),
    "config.storage.topic": ("MILLRACE_CONNECT_CONFIG_STORAGE_TOPIC", "connect-configs"),
    "offset.storage.topic": ("MILLRACE_CONNECT_OFFSET_STORAGE_TOPIC", "connect-offsets"),
    "status.storage.topic": ("MILLRACE_CONNECT_STATUS_STORAGE_TOPIC", "connect-status"),
}


def env(name, default=""):
    return os.environ.get(name, "").strip() or default


def fail(message):
    print(f"connect: {message}", file=sys.stderr)
    raise SystemExit(2)


def escape(value):
    """A value as java.util.Properties reads it back."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    out = out.replace("\t", "\\t").replace("\f", "\\f")
    return "\\" + out if out.startswith(" ") else out


path = env("MILLRACE_CONNECT_CONFIG", DEFAULT_CONFIG)
try:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
except FileNotFoundError:
    text = None
except OSError as exc:
    fail(f"cannot read the worker config {path}: {exc.strerror}")
given = parse_properties(text) if text is not None else {}
metrics = {
    "metrics.port": env("MILLRACE_CONNECT_METRICS_PORT", given.get("metrics.port", "").strip())
    or DEFAULT_METRICS_PORT,
    "metrics.host": env("MILLRACE_CONNECT_METRICS_HOST", given.get("metrics.host", "").strip())
    or "0.0.0.0",
}

if sys.argv[1] == "healthcheck":
    # 0 picks a free port, which cannot be known from here.
    port = metrics["metrics.port"]
    if port == "0":
        fail("no fixed connect metrics port to check (metrics.port=0)")
    # Every interface: ask loopback; else the one address the endpoint binds.
    host = metrics["metrics.host"]
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    host = f"[{host}]" if ":" in host else host
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=4) as response:
            raise SystemExit(0 if response.status == 200 else 1)
    except OSError as exc:  # URLError, HTTPError, timeouts
        print(f"connect: no answer from /metrics on port {port}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None

if text is None:
    missing = [name for name in CREDENTIALS if not env(name)]
    if missing:
        fail(
            f"no worker config: {path} does not exist and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set. Mount a worker.properties there "
            "(or point MILLRACE_CONNECT_CONFIG at one), or set MILLRACE_CONNECT_BOOTSTRAP_SERVERS, "
            "MILLRACE_CONNECT_USERNAME and MILLRACE_CONNECT_PASSWORD (a service account's API "
            "key id and secret)"
        )
    lines = ["# Written by docker/entrypoint.sh from the MILLRACE_CONNECT_* variables."]
    lines += [f"{key}={escape(env(name, default))}" for key, (name, default) in FROM_ENV.items()]
else:
    if any(env(name) for name in CREDENTIALS):
        print(
            f"connect: using {path}; MILLRACE_CONNECT_BOOTSTRAP_SERVERS, _USERNAME and "
            "_PASSWORD are ignored",
            file=sys.stderr,
        )
    if all(given.get(key, "").strip() == value for key, value in metrics.items()):
        print(path)
        raise SystemExit(0)
    # The empty line ends a continued last line, if the file has one.
    lines = [text.rstrip("\n"), "", "# Added by docker/entrypoint.sh (MILLRACE_CONNECT_METRICS_*)."]
lines += [f"{key}={escape(value)}" for key, value in metrics.items()]

# mkstemp creates the file for this user only (mode 600).
fd, written = tempfile.mkstemp(prefix="millrace-connect-", suffix=".properties")
with os.fdopen(fd, "w", encoding="utf-8") as handle:
    handle.write("\n".join(lines) + "\n")
print(written)
PY
}

role="${1:-web}"
if [ "$#" -gt 0 ]; then
    shift
fi

case "$role" in
    web)
        # daphne runs each request in a new thread: pool the database connections.
        export DATABASE_POOL_SIZE="${DATABASE_POOL_SIZE:-20}"
        # -v 0: no daphne access lines on stdout (they are neither JSON nor free of query
        # strings); the millrace.http logger writes one line per request instead.
        exec daphne -v 0 -b 0.0.0.0 -p 8000 "$@" control_plane.asgi:application
        ;;
    broker)
        # settings default the bind address to 127.0.0.1, which nothing outside the
        # container could reach. Metrics bind the same address unless set apart.
        export MILLRACE_BROKER_HOST="${MILLRACE_BROKER_HOST:-0.0.0.0}"
        exec python /app/manage.py broker "$@"
        ;;
    worker)
        exec celery -A control_plane worker -Q millrace -l INFO "$@"
        ;;
    beat)
        exec celery -A control_plane beat -l INFO \
            --schedule "${MILLRACE_DATA_DIR:-/var/lib/millrace}/celerybeat-schedule" "$@"
        ;;
    migrate)
        exec python /app/manage.py migrate --noinput "$@"
        ;;
    connect)
        # Exits with a message when there is no worker config (connect_config above).
        config="$(connect_config config)"
        exec python /app/manage.py connect "$config" "$@"
        ;;
    connect-fleet)
        exec python /app/manage.py connect --fleet "$@"
        ;;
    healthcheck)
        target="${1:-web}"
        case "$target" in
            web)
                exec python - <<'PY'
import os
import urllib.request

# The first ALLOWED_HOSTS entry as the Host, and X-Forwarded-Proto: https (trusted by default
# in production) so that SECURE_SSL_REDIRECT does not answer with a redirect.
host = os.environ.get("ALLOWED_HOSTS", "").split(",")[0].strip().lstrip(".")
if not host or host == "*":
    host = "localhost"
request = urllib.request.Request(
    "http://127.0.0.1:8000/healthz",
    headers={"Host": host, "X-Forwarded-Proto": "https"},
)
with urllib.request.urlopen(request, timeout=4) as response:  # raises on 4xx/5xx
    raise SystemExit(0 if response.status == 200 else 1)
PY
                ;;
            broker)
                exec python - <<'PY'
import os
import urllib.request

# "off" turns the port off and 0 picks a free one: neither can be checked from here.
port = os.environ.get("MILLRACE_BROKER_METRICS_PORT", "9644").strip().lower() or "9644"
if port in ("off", "0"):
    raise SystemExit(f"no fixed broker metrics port to check (MILLRACE_BROKER_METRICS_PORT={port})")
with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as response:
    raise SystemExit(0 if response.status == 200 else 1)
PY
                ;;
            connect)
                connect_config healthcheck
                ;;
            *)
                echo "healthcheck: unknown target '$target' (web, broker or connect)" >&2
                exit 2
                ;;
        esac
        ;;
    *)
        exec "$role" "$@"
        ;;
esac
