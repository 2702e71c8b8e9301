"""Settings from the environment: typed helpers, production refusals, check --deploy."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from control_plane import env

ROOT = Path(__file__).resolve().parent.parent


def test_envbool(monkeypatch):
    monkeypatch.setenv("X_FLAG", "yes")
    assert env.envbool("X_FLAG", False) is True
    monkeypatch.setenv("X_FLAG", "0")
    assert env.envbool("X_FLAG", True) is False
    monkeypatch.setenv("X_FLAG", "perhaps")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env.envbool("X_FLAG", False)


def test_envint(monkeypatch):
    monkeypatch.delenv("X_NUM", raising=False)
    assert env.envint("X_NUM", 7) == 7
    monkeypatch.setenv("X_NUM", "12")
    assert env.envint("X_NUM", 7) == 12
    monkeypatch.setenv("X_NUM", "twelve")
    with pytest.raises(ImproperlyConfigured, match="integer"):
        env.envint("X_NUM", 7)
    monkeypatch.setenv("X_NUM", "1")
    with pytest.raises(ImproperlyConfigured, match="at least 5"):
        env.envint("X_NUM", 7, minimum=5)


def test_envlist(monkeypatch):
    monkeypatch.setenv("X_LIST", " a.example, ,b.example ")
    assert env.envlist("X_LIST", []) == ["a.example", "b.example"]


def test_envsecret_reads_file(monkeypatch, tmp_path):
    path = tmp_path / "secret"
    path.write_text("s3cret\n")
    monkeypatch.delenv("X_SECRET", raising=False)
    monkeypatch.setenv("X_SECRET_FILE", str(path))
    assert env.envsecret("X_SECRET") == "s3cret"
    monkeypatch.setenv("X_SECRET", "direct")
    with pytest.raises(ImproperlyConfigured, match="not both"):
        env.envsecret("X_SECRET")
    monkeypatch.delenv("X_SECRET")
    monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="cannot be read"):
        env.envsecret("X_SECRET")


def manage(args, extra_env, tmp_path):
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DEBUG", "SECRET_KEY", "SECRET_KEY_FILE", "ALLOWED_HOSTS", "MILLRACE_ENV"}
    }
    environ.update({"MILLRACE_DATA_DIR": str(tmp_path / "data"), **extra_env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def django_python(code, environ):
    """Run ``python -c code`` with our settings in a fresh process with ``environ``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**environ, "DJANGO_SETTINGS_MODULE": "control_plane.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


PRODUCTION = {
    "MILLRACE_ENV": "production",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "ALLOWED_HOSTS": "millrace.example.com",
}


@pytest.mark.slow
def test_check_deploy_is_clean_in_production(tmp_path):
    result = manage(["check", "--deploy", "--fail-level", "WARNING"], PRODUCTION, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.slow
def test_secret_key_file_is_accepted(tmp_path):
    secret_file = tmp_path / "key"
    secret_file.write_text(secrets.token_urlsafe(64))
    extra = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    result = manage(["check", "--deploy"], {**extra, "SECRET_KEY_FILE": str(secret_file)}, tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SECRET_KEY": ""}, "SECRET_KEY (or SECRET_KEY_FILE) is required"),
        ({"SECRET_KEY": "short"}, "SECRET_KEY is insecure"),
        ({"SECRET_KEY": "django-insecure-" + "x" * 60}, "SECRET_KEY is insecure"),
        ({"DEBUG": "true"}, "DEBUG must be off"),
        ({"ALLOWED_HOSTS": ""}, "ALLOWED_HOSTS is required"),
        ({"ALLOWED_HOSTS": "*"}, "ALLOWED_HOSTS must name the hosts"),
        ({"ALLOWED_HOSTS": "millrace.example.com,*"}, "ALLOWED_HOSTS must name the hosts"),
        ({"MILLRACE_INTERNAL_SECRET": "a"}, "MILLRACE_INTERNAL_SECRET is insecure"),
        ({"MILLRACE_INTERNAL_SECRET": "ab" * 40}, "MILLRACE_INTERNAL_SECRET is insecure"),
        ({"MILLRACE_ENV": "staging"}, "MILLRACE_ENV must be"),
    ],
)
def test_production_refuses_to_start(tmp_path, change, message):
    result = manage(["check"], {**PRODUCTION, **change}, tmp_path)
    assert result.returncode != 0
    assert message in result.stderr


def test_embedded_default_uses_sqlite_wal_and_local_layers(tmp_path):
    code = (
        "import django, json; django.setup();"
        "from django.conf import settings as s; from django.db import connection as c;"
        "cur = c.cursor(); cur.execute('PRAGMA journal_mode'); mode = cur.fetchone()[0];"
        "print(json.dumps([c.vendor, mode, s.CHANNEL_LAYERS['default']['BACKEND'],"
        " s.CELERY_BROKER_URL]))"
    )
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    environ.update(MILLRACE_DATA_DIR=str(tmp_path))
    result = django_python(code, environ)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        '["sqlite", "wal", "channels.layers.InMemoryChannelLayer", "filesystem://localhost//"]'
    )
    assert (tmp_path / "millrace.sqlite3").exists()
    assert oct((tmp_path / "secret_key").stat().st_mode & 0o777) == "0o600"
