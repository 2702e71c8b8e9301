"""``manage.py broker``'s per-pod options: the id from a StatefulSet ordinal and ports given
as "N+id", so one pod template serves every broker."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management.base import CommandError

from control_plane.brokerlink.management.commands.broker import broker_id_from, port_for

ROOT = Path(__file__).resolve().parent.parent


def test_broker_id_is_a_number_or_the_pod_ordinal_plus_one():
    assert broker_id_from("3", "anything") == 3
    assert broker_id_from("ordinal", "millrace-broker-0") == 1
    assert broker_id_from("ordinal", "millrace-broker-12.millrace-broker-headless") == 13


@pytest.mark.parametrize(
    ("value", "host"), [("0", "h"), ("-1", "h"), ("two", "h"), ("ordinal", "broker")]
)
def test_bad_broker_ids_are_refused_by_name(value, host):
    with pytest.raises(CommandError, match="--id"):
        broker_id_from(value, host)


def test_ports_may_add_the_broker_id():
    assert port_for("--advertised-port", None, 2) is None
    assert port_for("--advertised-port", "9092", 2) == 9092
    assert port_for("--tls-advertised-port", "31090+id", 2) == 31092


@pytest.mark.parametrize("value", ["x", "9092+ID", "70000", "1+id+id"])
def test_bad_ports_are_refused_by_name(value):
    with pytest.raises(CommandError, match="--tls-advertised-port"):
        port_for("--tls-advertised-port", value, 1)


def test_the_broker_raises_its_open_files_limit_to_the_hard_limit():
    """Each open partition replica holds three descriptors: `manage.py broker` takes what
    the system allows (in a child process, so this one's limit is untouched)."""
    code = (
        "import resource, django; django.setup();"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE);"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard));"
        "from control_plane.brokerlink.management.commands.broker import "
        "raise_open_files_limit as r;"
        "now = r(); print(now, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "control_plane.settings"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    now, applied, hard = (int(v) for v in out)
    assert now == applied
    assert applied == hard or hard == resource.RLIM_INFINITY
    assert applied > 64
