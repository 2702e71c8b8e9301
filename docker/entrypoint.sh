#!/usr/bin/env bash
# Start one Millrace role in this container; the first argument names it.
#   web        daphne serving the ASGI app on 0.0.0.0:8000 (console, admin API, /healthz)
#   broker     one Kafka-protocol broker (9092; 9093 with TLS; 9644 metrics and probes)
#   worker     a Celery worker on the millrace queue (9809 metrics)
#   beat       the Celery beat scheduler (schedule file in $MILLRACE_DATA_DIR); run exactly one
#   migrate    apply database migrations, then exit
#   healthcheck [web|broker]
#              exit 0 when the role answers /healthz (web: port 8000; broker: its metrics
#              port); used by the image's HEALTHCHECK and by compose
# Anything else is executed as given, e.g. `python manage.py createsuperuser`.
# Extra arguments after a role name are passed on to its command.
set -euo pipefail

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
            *)
                echo "healthcheck: unknown target '$target' (web or broker)" >&2
                exit 2
                ;;
        esac
        ;;
    *)
        exec "$role" "$@"
        ;;
esac
