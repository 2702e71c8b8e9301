#!/usr/bin/env bash
# Start one Millrace role in this container; the first argument names it.
#   web        daphne serving the ASGI app on 0.0.0.0:8000 (console, admin API, /healthz)
#   worker     a Celery worker on the millrace queue
#   beat       the Celery beat scheduler (schedule file in $MILLRACE_DATA_DIR)
#   migrate    apply database migrations, then exit
#   healthcheck  exit 0 when the web role answers /healthz (used by HEALTHCHECK)
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
        exec daphne -b 0.0.0.0 -p 8000 "$@" control_plane.asgi:application
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
        exec python - <<'PY'
import os
import urllib.request

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
    *)
        exec "$role" "$@"
        ;;
esac
