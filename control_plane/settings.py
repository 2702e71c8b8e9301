"""Django settings for Millrace, read from the environment.

Two shapes of deployment share this file:

* **embedded** (no ``DATABASE_URL`` / ``REDIS_URL``): SQLite in WAL mode under
  ``MILLRACE_DATA_DIR``, Channels' in-memory layer, a local-memory cache and Celery's
  filesystem transport, so ``make run`` needs no server;
* **services**: Postgres from ``DATABASE_URL`` and Redis from ``REDIS_URL`` for Celery,
  Channels and the cache.

``MILLRACE_ENV=production`` turns on the production checks: a real ``SECRET_KEY`` (or
``SECRET_KEY_FILE``) is required, ``DEBUG`` must be off, ``ALLOWED_HOSTS`` must be set,
and cookies/HSTS/SSL redirect are hardened. Nothing outside this module branches on
which backend is in use.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from control_plane.env import envbool, envint, envlist, envpath, envsecret, envstr
from control_plane.logs import LOG_FORMATS, logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

MILLRACE_ENV = envstr("MILLRACE_ENV", "development")
if MILLRACE_ENV not in {"development", "production"}:
    raise ImproperlyConfigured(
        f"MILLRACE_ENV must be 'development' or 'production', got {MILLRACE_ENV!r}"
    )
PRODUCTION = MILLRACE_ENV == "production"

DEBUG = envbool("DEBUG", default=not PRODUCTION)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DEBUG must be off when MILLRACE_ENV=production")

DATA_DIR = envpath("MILLRACE_DATA_DIR", BASE_DIR / "data")


def _is_insecure_secret(value: str) -> bool:
    return (
        len(value) < 50
        or len(set(value)) < 5
        or value.startswith("django-insecure")
        or value.lower() in {"changeme", "secret", "please-change-me"}
    )


def _development_secret_key() -> str:
    """A random key kept in the data dir so sessions survive restarts of ``make run``."""
    path = DATA_DIR / "secret_key"
    if path.exists():
        return path.read_text().strip()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(64)
    path.touch(mode=0o600)
    path.write_text(key)
    return key


_secret = envsecret("SECRET_KEY")
if PRODUCTION:
    if not _secret:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required in production")
    if _is_insecure_secret(_secret):
        raise ImproperlyConfigured(
            "SECRET_KEY is insecure: use at least 50 random characters "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(64))')"
        )
SECRET_KEY = _secret or _development_secret_key()
# What Millrace's own services prove to its brokers (data_plane.internal_auth); every web,
# worker and broker process of a deployment must share it (or share SECRET_KEY).
# It authenticates the principals that act for every tenant, so production holds it to the
# same rules as SECRET_KEY: a guessable one would be guessed online.
_internal_secret = envsecret("MILLRACE_INTERNAL_SECRET")
if PRODUCTION and _internal_secret and _is_insecure_secret(_internal_secret):
    raise ImproperlyConfigured(
        "MILLRACE_INTERNAL_SECRET is insecure: use at least 50 random characters, or leave "
        "it unset to derive it from SECRET_KEY"
    )
MILLRACE_INTERNAL_SECRET = (
    _internal_secret
    or hmac.new(SECRET_KEY.encode(), b"millrace internal secret", hashlib.sha256).hexdigest()
)

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is required in production")
if PRODUCTION and "*" in ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must name the hosts Millrace is served on; '*' accepts any Host "
        "header (host-header poisoning of password-reset and absolute links)"
    )
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "control_plane.core",
    "control_plane.brokerlink",
    "control_plane.tenancy",
    "control_plane.catalog",
    "control_plane.groups",
    "control_plane.transactions",
    "control_plane.connect",
    "control_plane.controller",
    "control_plane.access",
    "control_plane.accounts",
    "control_plane.lifecycle",
    "control_plane.usage",
    "control_plane.alerts",
    "control_plane.audit",
    "control_plane.api",
    "control_plane.streams",
    "control_plane.ops",
    "frontend",
]

MIDDLEWARE = [
    # First, so every response (redirects and errors too) is counted and carries its
    # X-Request-ID, and every log line of the request has the request's context.
    "control_plane.core.request_context.RequestContextMiddleware",
    "control_plane.metrics.MetricsMiddleware",
    # Probes and scrapes name a pod IP as Host: answered before the host check (probes.py).
    "control_plane.core.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "control_plane.urls"
WSGI_APPLICATION = "control_plane.wsgi.application"
ASGI_APPLICATION = "control_plane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.context_processors.tenants",
            ],
        },
    },
]

# --- metadata store -------------------------------------------------------------------
DATABASE_URL = envstr("DATABASE_URL")
if DATABASE_URL:
    # A pool suits the web process: daphne runs each request's view in a fresh thread, and
    # Django's connections are per thread, so without one every request opens a
    # connection. Long-lived threads (brokers, workers) keep theirs (DATABASE_CONN_MAX_AGE).
    DATABASE_POOL_SIZE = envint("DATABASE_POOL_SIZE", 0, minimum=0)
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL,
            conn_max_age=(
                0 if DATABASE_POOL_SIZE else envint("DATABASE_CONN_MAX_AGE", 60, minimum=0)
            ),
            # A reused connection is checked first (with a pool: as it is handed out).
            conn_health_checks=True,
        )
    }
    if DATABASE_POOL_SIZE:
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": DATABASE_POOL_SIZE,
            # Seconds a request waits for a free connection before it fails.
            "timeout": envint("DATABASE_POOL_TIMEOUT", 10, minimum=1),
        }
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(DATA_DIR / "millrace.sqlite3"),
            "OPTIONS": {
                # WAL lets the web app, worker and beat read while one of them writes.
                "init_command": (
                    "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;PRAGMA foreign_keys=ON;"
                ),
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
EMBEDDED_DATABASE = not DATABASE_URL

# --- Redis: Celery, Channels, cache ---------------------------------------------------
REDIS_URL = envstr("REDIS_URL")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "millrace",
            # One connection pool per process: Django makes a cache object per request
            # context, and each would otherwise open its own connection.
            "OPTIONS": {"pool_class": "control_plane.core.cache.SharedConnectionPool"},
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 times reads out after 5 s, exactly channels-redis' blocking
            # receive time (BZPOPMIN 5 s): a quiet socket's receive would race it and die.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                "prefix": "millrace:channels",
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"global_keyprefix": "millrace:"}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # Celery's filesystem transport with atomic publishes (control_plane.core.celery_transport):
    # a queue in a folder, shared by every local process.
    _celery_dir = DATA_DIR / "celery" / "queue"
    _celery_control_dir = DATA_DIR / "celery" / "control"
    _celery_dir.mkdir(parents=True, exist_ok=True)
    _celery_control_dir.mkdir(parents=True, exist_ok=True)
    # "localhost": kombu warns about a URL without a host (the folder is all that matters).
    CELERY_BROKER_URL = "filesystem://localhost//"
    CELERY_BROKER_TRANSPORT = "control_plane.core.celery_transport:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_celery_dir),
        "data_folder_out": str(_celery_dir),
        "control_folder": str(_celery_control_dir),
        "store_processed": False,
        "polling_interval": 0.5,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "millrace"
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_TIMEZONE = "UTC"

# --- auth -----------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
LOGIN_URL = "frontend:login"
LOGIN_REDIRECT_URL = "frontend:home"
LOGOUT_REDIRECT_URL = "frontend:login"
AUTHENTICATION_BACKENDS = ["control_plane.accounts.backends.UsernameOrEmailBackend"]

# --- accounts (docs/accounts.md) ---------------------------------------------------------
# People sign up themselves (an e-mail address they prove, then a tenant of their own);
# in production only with a mail server to prove addresses through.
MILLRACE_SIGNUP_ENABLED = envbool(
    "MILLRACE_SIGNUP_ENABLED", bool(envstr("EMAIL_HOST")) or not PRODUCTION
)
if PRODUCTION and MILLRACE_SIGNUP_ENABLED and not envstr("EMAIL_HOST"):
    raise ImproperlyConfigured(
        "MILLRACE_SIGNUP_ENABLED needs EMAIL_HOST in production: sign-up mails a link"
    )
MILLRACE_SIGNUP_MAX_TENANTS = envint("MILLRACE_SIGNUP_MAX_TENANTS", 3, minimum=0)
MILLRACE_INVITATION_DAYS = envint("MILLRACE_INVITATION_DAYS", 7, minimum=1)
# Tenant deletion (control_plane.lifecycle): a worker's hold on a deletion lapses this long
# after its last progress (another worker then resumes it); topics are deleted this many at
# a time, each batch waiting (at most the last setting) until live brokers applied it.
MILLRACE_DELETION_LEASE_SECONDS = envint("MILLRACE_DELETION_LEASE_SECONDS", 60, minimum=1)
MILLRACE_DELETION_TOPIC_BATCH = envint("MILLRACE_DELETION_TOPIC_BATCH", 100, minimum=1)
MILLRACE_DELETION_BROKER_WAIT_SECONDS = envint(
    "MILLRACE_DELETION_BROKER_WAIT_SECONDS", 120, minimum=0
)
# Wrong passwords for one account (from any address) before sign-in is refused for a while.
MILLRACE_LOGIN_LOCKOUT_FAILURES = envint("MILLRACE_LOGIN_LOCKOUT_FAILURES", 10, minimum=1)
MILLRACE_LOGIN_LOCKOUT_SECONDS = envint("MILLRACE_LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
# Single sign-on with one OpenID Connect provider (docs/accounts.md).
MILLRACE_OIDC_ISSUER = envstr("MILLRACE_OIDC_ISSUER") or ""
MILLRACE_OIDC_CLIENT_ID = envstr("MILLRACE_OIDC_CLIENT_ID") or ""
MILLRACE_OIDC_CLIENT_SECRET = envsecret("MILLRACE_OIDC_CLIENT_SECRET") or ""
MILLRACE_OIDC_SCOPES = envstr("MILLRACE_OIDC_SCOPES") or "openid email profile"
MILLRACE_OIDC_NAME = envstr("MILLRACE_OIDC_NAME") or "single sign-on"
# The name authenticator apps show beside a person's two-factor codes.
MILLRACE_TOTP_ISSUER = envstr("MILLRACE_TOTP_ISSUER") or "Millrace"
# Verification and password-reset links work this long (Django's setting).
PASSWORD_RESET_TIMEOUT = envint("MILLRACE_LINK_TIMEOUT_SECONDS", 3 * 24 * 3600, minimum=60)
# The address links in mail point at; unset: the address the request came to (which
# ALLOWED_HOSTS limits in production).
MILLRACE_PUBLIC_URL = envstr("MILLRACE_PUBLIC_URL") or ""
# Mail: SMTP when EMAIL_HOST is set, else kept for the development mail page (/dev/mail/).
EMAIL_HOST = envstr("EMAIL_HOST") or ""
EMAIL_PORT = envint("EMAIL_PORT", 587 if envbool("EMAIL_USE_TLS", False) else 25, minimum=1)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL") or "Millrace <no-reply@millrace.localhost>"
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "control_plane.accounts.mail.OutboxBackend"
)

# --- API keys ---------------------------------------------------------------------------
# SCRAM iteration count for new keys (Kafka's minimum is 4096).
MILLRACE_SCRAM_ITERATIONS = envint("MILLRACE_SCRAM_ITERATIONS", 4096, minimum=4096)
# How long a verified key:secret pair is remembered in-process, so the slow hash runs
# once per key per window rather than once per HTTP request. Revocation and expiry are
# still checked against the database on every request.
MILLRACE_API_KEY_CACHE_SECONDS = envint("MILLRACE_API_KEY_CACHE_SECONDS", 60, minimum=0)
MILLRACE_AUTH_FAILURES_PER_MINUTE = envint("MILLRACE_AUTH_FAILURES_PER_MINUTE", 20, minimum=1)

# --- tenant defaults (operators change per tenant) -------------------------------------
MILLRACE_DEFAULT_TENANT_LIMITS = {
    "max_partitions": envint("MILLRACE_DEFAULT_MAX_PARTITIONS", 1000, minimum=1),
    "max_storage_bytes": envint("MILLRACE_DEFAULT_MAX_STORAGE_BYTES", 100 * 2**30, minimum=1),
    "produce_byte_rate": envint("MILLRACE_DEFAULT_PRODUCE_BYTE_RATE", 50 * 2**20, minimum=1),
    "fetch_byte_rate": envint("MILLRACE_DEFAULT_FETCH_BYTE_RATE", 100 * 2**20, minimum=1),
    # Connect (Step 14): connectors in the tenant's Connect cluster, and their tasks.max
    # summed.
    "max_connectors": envint("MILLRACE_DEFAULT_MAX_CONNECTORS", 20, minimum=1),
    "max_connector_tasks": envint("MILLRACE_DEFAULT_MAX_CONNECTOR_TASKS", 50, minimum=1),
    # Authenticated connections of a tenant on each broker.
    "max_connections": envint("MILLRACE_DEFAULT_MAX_CONNECTIONS", 1000, minimum=1),
}
# Replication factor bounds while no broker has registered yet; afterwards live brokers
# bound it. New topics default to min(default, live brokers).
MILLRACE_MAX_REPLICATION_FACTOR = envint("MILLRACE_MAX_REPLICATION_FACTOR", 3, minimum=1)
MILLRACE_DEFAULT_REPLICATION_FACTOR = envint("MILLRACE_DEFAULT_REPLICATION_FACTOR", 3, minimum=1)
# Partitions of a topic created without a count (auto-creation, CreateTopics with -1):
# Kafka's num.partitions. A tenant's own setting (Tenant.default_partitions) wins.
MILLRACE_DEFAULT_PARTITIONS = envint("MILLRACE_DEFAULT_PARTITIONS", 1, minimum=1)
# A broker that has not renewed its lease for this long is fenced and loses its
# leaderships (brokers renew every quarter of it); this bounds failover after a crash.
MILLRACE_BROKER_LEASE_SECONDS = envint("MILLRACE_BROKER_LEASE_SECONDS", 3, minimum=1)
MILLRACE_CLUSTER_ID = envstr("MILLRACE_CLUSTER_ID", "millrace-cluster")
# How long the metadata change log keeps a change (core/models.py): a broker whose metadata
# is older than that reads a full snapshot instead of the changes.
MILLRACE_METADATA_CHANGE_RETENTION_SECONDS = envint(
    "MILLRACE_METADATA_CHANGE_RETENTION_SECONDS", 3600, minimum=60
)
# The Kafka listener of `manage.py broker` (and the one `manage.py up` starts).
MILLRACE_BROKER_HOST = envstr("MILLRACE_BROKER_HOST", "127.0.0.1")
MILLRACE_BROKER_PORT = envint("MILLRACE_BROKER_PORT", 9092, minimum=0)
MILLRACE_BROKER_ADVERTISED_HOST = envstr("MILLRACE_BROKER_ADVERTISED_HOST")
# Unauthenticated clients act as the `default` tenant: development only, never production.
MILLRACE_BROKER_ALLOW_ANONYMOUS = envbool("MILLRACE_BROKER_ALLOW_ANONYMOUS", False)
# Which broker this process is: a number, or "ordinal" for the number after the last "-"
# of the host name plus one (a StatefulSet's pod millrace-broker-0 is broker 1).
MILLRACE_BROKER_ID = envstr("MILLRACE_BROKER_ID", "1")
# The advertised port: a number, or "N+id" (N plus the broker id; per-broker NodePorts).
MILLRACE_BROKER_ADVERTISED_PORT = envstr("MILLRACE_BROKER_ADVERTISED_PORT")
# /metrics, /healthz and /readyz of a broker: on in production (9644), off in development
# unless set; "off" turns it off, 0 picks a free port.
MILLRACE_BROKER_METRICS_HOST = envstr("MILLRACE_BROKER_METRICS_HOST")
MILLRACE_BROKER_METRICS_PORT = envstr(
    "MILLRACE_BROKER_METRICS_PORT", "9644" if PRODUCTION else "off"
)
# The SASL_SSL listener: off unless a port is set; PEM certificate chain and key files.
MILLRACE_BROKER_TLS_PORT = envstr("MILLRACE_BROKER_TLS_PORT")
MILLRACE_BROKER_TLS_CERT_FILE = envstr("MILLRACE_BROKER_TLS_CERT_FILE")
MILLRACE_BROKER_TLS_KEY_FILE = envstr("MILLRACE_BROKER_TLS_KEY_FILE")
MILLRACE_BROKER_TLS_ADVERTISED_HOST = envstr("MILLRACE_BROKER_TLS_ADVERTISED_HOST")
MILLRACE_BROKER_TLS_ADVERTISED_PORT = envstr("MILLRACE_BROKER_TLS_ADVERTISED_PORT")
# On SIGTERM a broker waits at most this long for its leaderships to move elsewhere.
MILLRACE_CONTROLLED_SHUTDOWN_TIMEOUT_SECONDS = envint(
    "MILLRACE_CONTROLLED_SHUTDOWN_TIMEOUT_SECONDS", 30, minimum=0
)
# Connection limits of every broker (Kafka's names in docs/deploy.md); 0 turns one off.
MILLRACE_BROKER_AUTH_TIMEOUT_MS = envint("MILLRACE_BROKER_AUTH_TIMEOUT_MS", 10_000, minimum=0)
MILLRACE_BROKER_CONNECTIONS_MAX_IDLE_MS = envint(
    "MILLRACE_BROKER_CONNECTIONS_MAX_IDLE_MS", 600_000, minimum=0
)
MILLRACE_BROKER_FAILED_AUTH_MAX_DELAY_MS = envint(
    "MILLRACE_BROKER_FAILED_AUTH_MAX_DELAY_MS", 5000, minimum=0
)
MILLRACE_BROKER_QUEUED_MAX_REQUEST_BYTES = envint(
    "MILLRACE_BROKER_QUEUED_MAX_REQUEST_BYTES", 500 * 2**20, minimum=2**20
)
MILLRACE_BROKER_MAX_CONNECTIONS_PER_IP = envint(
    "MILLRACE_BROKER_MAX_CONNECTIONS_PER_IP", 1000, minimum=0
)
MILLRACE_BROKER_MAX_CONNECTIONS_PER_TENANT = envint(
    "MILLRACE_BROKER_MAX_CONNECTIONS_PER_TENANT", 10_000, minimum=0
)
MILLRACE_AUDIT_RETENTION_DAYS = envint("MILLRACE_AUDIT_RETENTION_DAYS", 365, minimum=1)
# Client software and request versions: how often brokers report them, how long kept.
MILLRACE_BROKER_CLIENT_REPORT_SECONDS = envint(
    "MILLRACE_BROKER_CLIENT_REPORT_SECONDS", 60, minimum=1
)
MILLRACE_CLIENT_VERSIONS_KEEP_DAYS = envint("MILLRACE_CLIENT_VERSIONS_KEEP_DAYS", 30, minimum=1)
# Usage metering (docs/usage.md): brokers count and report every so often; off only for a
# benchmark's baseline.
MILLRACE_BROKER_METERING = envbool("MILLRACE_BROKER_METERING", True)
MILLRACE_BROKER_USAGE_REPORT_SECONDS = envint("MILLRACE_BROKER_USAGE_REPORT_SECONDS", 60, minimum=1)
# The control plane sums reports into hourly rows every so often (and when asked); raw
# reports are kept this many days after their hour (late ones are summed in), hourly
# rows this many.
MILLRACE_USAGE_AGGREGATE_SECONDS = envint("MILLRACE_USAGE_AGGREGATE_SECONDS", 300, minimum=1)
MILLRACE_USAGE_RAW_DAYS = envint("MILLRACE_USAGE_RAW_DAYS", 3, minimum=1)
MILLRACE_USAGE_KEEP_DAYS = envint("MILLRACE_USAGE_KEEP_DAYS", 400, minimum=1)
# Alerts (docs/alerts.md): how often rules are evaluated; deliveries are tried this many
# times in all, the first retry after the second setting, each later one after twice the
# wait before; webhooks may go to private and loopback addresses only outside production.
MILLRACE_ALERT_EVALUATE_SECONDS = envint("MILLRACE_ALERT_EVALUATE_SECONDS", 30, minimum=1)
MILLRACE_ALERT_RETRY_SECONDS = envint("MILLRACE_ALERT_RETRY_SECONDS", 10, minimum=1)
MILLRACE_ALERT_DELIVERY_ATTEMPTS = envint("MILLRACE_ALERT_DELIVERY_ATTEMPTS", 6, minimum=1)
MILLRACE_ALERT_WEBHOOK_PRIVATE = envbool("MILLRACE_ALERT_WEBHOOK_PRIVATE", not PRODUCTION)
# Transactions, with Kafka's names and defaults: the longest transaction.timeout.ms a
# producer may ask for, and how often coordinators abort transactions open for longer
# than their timeout.
MILLRACE_TRANSACTION_MAX_TIMEOUT_MS = envint(
    "MILLRACE_TRANSACTION_MAX_TIMEOUT_MS", 900_000, minimum=1
)
MILLRACE_TRANSACTION_ABORT_CHECK_INTERVAL_MS = envint(
    "MILLRACE_TRANSACTION_ABORT_CHECK_INTERVAL_MS", 10_000, minimum=10
)
# The transaction.version feature brokers finalize (Kafka 4's): 2 is transactions V2
# (KIP-890 part 2: an epoch bump per transaction, partitions and groups added by the
# brokers), which clients that know it use; 0 or 1 keeps every client on V1.
MILLRACE_TRANSACTION_VERSION = envint("MILLRACE_TRANSACTION_VERSION", 2, minimum=0, maximum=2)
# Consumer groups, with Kafka's names and defaults (group.*, offsets.retention.minutes).
MILLRACE_GROUP_MIN_SESSION_TIMEOUT_MS = envint(
    "MILLRACE_GROUP_MIN_SESSION_TIMEOUT_MS", 6_000, minimum=1
)
MILLRACE_GROUP_MAX_SESSION_TIMEOUT_MS = envint(
    "MILLRACE_GROUP_MAX_SESSION_TIMEOUT_MS", 1_800_000, minimum=1
)
MILLRACE_GROUP_INITIAL_REBALANCE_DELAY_MS = envint(
    "MILLRACE_GROUP_INITIAL_REBALANCE_DELAY_MS", 3_000, minimum=0
)
MILLRACE_GROUP_MAX_SIZE = envint("MILLRACE_GROUP_MAX_SIZE", 1_000, minimum=1)
# The rebalance protocols brokers serve (group.coordinator.rebalance.protocols): "classic",
# and "consumer" for KIP-848 groups (ConsumerGroupHeartbeat; both by default, as in Kafka
# 4), with the heartbeat interval and session timeout the coordinator gives their members
# (group.consumer.*).
MILLRACE_GROUP_PROTOCOLS = envlist("MILLRACE_GROUP_PROTOCOLS", ["classic", "consumer"])
MILLRACE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS = envint(
    "MILLRACE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", 5_000, minimum=100
)
MILLRACE_GROUP_CONSUMER_SESSION_TIMEOUT_MS = envint(
    "MILLRACE_GROUP_CONSUMER_SESSION_TIMEOUT_MS", 45_000, minimum=1_000
)
# Replication (Kafka's replica.lag.time.max.ms and replica.fetch.wait.max.ms).
MILLRACE_REPLICA_LAG_TIME_MAX_MS = envint("MILLRACE_REPLICA_LAG_TIME_MAX_MS", 30_000, minimum=100)
MILLRACE_REPLICA_FETCH_WAIT_MS = envint("MILLRACE_REPLICA_FETCH_WAIT_MS", 500, minimum=10)
MILLRACE_OFFSETS_RETENTION_MINUTES = envint("MILLRACE_OFFSETS_RETENTION_MINUTES", 10_080, minimum=1)
# Lag history for the console's charts: one sample per group partition every interval,
# kept for the window.
# Connect (docs/connect.md): file connectors configured over the REST API may only use files
# under <this>/<tenant slug>.
MILLRACE_CONNECT_FILE_ROOT = envpath("MILLRACE_CONNECT_FILE_ROOT", DATA_DIR / "connect-files")
# The data API (REST produce/consume, WebSocket streams; docs/streams.md).
MILLRACE_REST_MAX_BODY_BYTES = envint("MILLRACE_REST_MAX_BODY_BYTES", 8 * 2**20, minimum=1024)
MILLRACE_REST_MAX_RECORDS = envint("MILLRACE_REST_MAX_RECORDS", 10_000, minimum=1)
MILLRACE_REST_MAX_CONSUMERS_PER_TENANT = envint(
    "MILLRACE_REST_MAX_CONSUMERS_PER_TENANT", 100, minimum=1
)
MILLRACE_IDEMPOTENCY_HOURS = envint("MILLRACE_IDEMPOTENCY_HOURS", 24, minimum=1)
MILLRACE_WS_MAX_WINDOW = envint("MILLRACE_WS_MAX_WINDOW", 10_000, minimum=1)
MILLRACE_WS_AUTH_TIMEOUT_SECONDS = envint("MILLRACE_WS_AUTH_TIMEOUT_SECONDS", 10, minimum=1)
MILLRACE_WS_KEY_CHECK_SECONDS = envint("MILLRACE_WS_KEY_CHECK_SECONDS", 2, minimum=1)
MILLRACE_WS_MAX_BAD_FRAMES = envint("MILLRACE_WS_MAX_BAD_FRAMES", 10, minimum=1)
# Django reads at most this much of a body into memory: the produce limit plus room.
DATA_UPLOAD_MAX_MEMORY_SIZE = MILLRACE_REST_MAX_BODY_BYTES + 64 * 1024

MILLRACE_LAG_SAMPLE_SECONDS = envint("MILLRACE_LAG_SAMPLE_SECONDS", 60, minimum=5)
MILLRACE_LAG_HISTORY_HOURS = envint("MILLRACE_LAG_HISTORY_HOURS", 24, minimum=1)

# --- REST API -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "control_plane.api.authentication.PersonalTokenAuthentication",
        "control_plane.api.authentication.ApiKeyAuthentication",
        "control_plane.api.authentication.CsrfSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "control_plane.api.pagination.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "control_plane.api.errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
if DEBUG:
    REST_FRAMEWORK["DEFAULT_RENDERER_CLASSES"].append(
        "rest_framework.renderers.BrowsableAPIRenderer"
    )
SPECTACULAR_SETTINGS = {
    "TITLE": "Millrace admin API",
    "DESCRIPTION": (
        "Tenants, members, topics, service accounts, API keys, ACLs and the audit log; "
        "and the data API (tag data): produce, read partitions, consumer instances. "
        "Authenticate with a console session or an API key (HTTP Basic key:secret, or "
        "Bearer key.secret); the data API takes API keys only."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Keys and values share one format enum per direction in the data API's schema.
    "ENUM_NAME_OVERRIDES": {
        "RecordFormatEnum": "control_plane.streams.codec.FORMATS",
        "ReadFormatEnum": "control_plane.streams.codec.READ_FORMATS",
        "HeaderFormatEnum": "control_plane.streams.codec.HEADER_FORMATS",
        "PatternEnum": "control_plane.access.presets.PATTERNS",
    },
}

# --- i18n, static ------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# Build output (collectstatic), kept apart from runtime state in the data dir.
STATIC_ROOT = envpath("STATIC_ROOT", BASE_DIR / "staticfiles")
if not PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns when it is missing
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION

# --- security -----------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", True)
    if not SECURE_HSTS_PRELOAD:
        # Opting out of the preload list is a deliberate choice, not a finding.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    # Behind a TLS-terminating proxy (ingress) that sets X-Forwarded-Proto.
    if envbool("SECURE_PROXY_SSL_HEADER", True):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Reverse proxies in front of the web tier that may set X-Forwarded-For (audit source IP).
MILLRACE_TRUSTED_PROXIES = envint("MILLRACE_TRUSTED_PROXIES", 0, minimum=0)

# --- operations: metrics and logs (docs: control_plane/metrics.py, control_plane/logs.py) --
# /metrics of the web tier (Prometheus text format) answers requests carrying
# "Authorization: Bearer <token>"; with no token set, only loopback clients.
MILLRACE_METRICS_TOKEN = envsecret("MILLRACE_METRICS_TOKEN") or ""
# The Celery worker's /metrics (task counts and durations); 0 turns it off. Prometheus
# reaches it on the pod's address, so production binds every interface by default.
MILLRACE_WORKER_METRICS_PORT = envint("MILLRACE_WORKER_METRICS_PORT", 9809, minimum=0)
MILLRACE_WORKER_METRICS_HOST = envstr(
    "MILLRACE_WORKER_METRICS_HOST",
    "0.0.0.0" if PRODUCTION else "127.0.0.1",  # noqa: S104 - a scrape target in a pod
)
# Probes and scrapers talk plain HTTP to the pod inside the cluster: no redirect to https.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# "json" (one object per line, for log collectors) or "plain" (readable); both carry the
# request context (request_id, tenant, user_id) and redact secrets.
MILLRACE_LOG_FORMAT = (envstr("MILLRACE_LOG_FORMAT") or ("json" if PRODUCTION else "plain")).lower()
if MILLRACE_LOG_FORMAT not in LOG_FORMATS:
    raise ImproperlyConfigured(
        f"MILLRACE_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {MILLRACE_LOG_FORMAT!r}"
    )
LOGGING = logging_config(MILLRACE_LOG_FORMAT, level=envstr("LOG_LEVEL", "INFO"))
