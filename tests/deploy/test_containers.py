"""The image and compose file: entrypoint roles, the Dockerfile's final stage, and compose
services that only run roles the entrypoint knows. Docker is not needed: the files are read,
and the entrypoint's broker health check is run against a real broker metrics endpoint."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from data_plane.broker.metrics import BrokerMetrics, HealthServer
from tests.deploy.conftest import DOCKER, ROLES, load_yaml

ENTRYPOINT = DOCKER / "entrypoint.sh"
IMAGE = "millrace:local"


def case_arms(script: str) -> dict[str, str]:
    """The arms of the entrypoint's top-level `case "$role" in ... esac`: pattern -> body."""
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == 'case "$role" in')
    base = len(lines[start]) - len(lines[start].lstrip())
    arms: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines[start + 1 :]:
        indent = len(line) - len(line.lstrip())
        if line.strip() == "esac" and indent == base:
            break
        arm = re.fullmatch(r"\s*([^\s()]+)\)", line)
        if arm and indent == base + 4:
            current = []
            for pattern in arm.group(1).split("|"):
                arms[pattern] = current
        elif current is not None:
            current.append(line)
    return {pattern: "\n".join(body) for pattern, body in arms.items()}


def entrypoint_roles() -> set[str]:
    return {p for p in case_arms(ENTRYPOINT.read_text()) if p != "*"}


def test_case_arms_parser_reads_only_the_top_level_case():
    arms = case_arms(
        'case "$role" in\n'
        "    a|b)\n        run a\n        ;;\n"
        '    c)\n        case "$x" in\n            inner)\n                ;;\n        esac\n'
        "        ;;\n"
        '    *)\n        exec "$role"\n        ;;\n'
        "esac\n"
    )
    assert set(arms) == {"a", "b", "c", "*"}
    assert "run a" in arms["b"] and "inner)" in arms["c"]


def test_every_interface_role_is_in_the_entrypoint():
    assert ROLES <= entrypoint_roles()
    assert "*" in case_arms(ENTRYPOINT.read_text()), "anything else must still run as given"


def test_role_commands():
    arms = case_arms(ENTRYPOINT.read_text())
    assert "daphne -v 0 -b 0.0.0.0 -p 8000" in arms["web"]
    assert "exec python /app/manage.py broker" in arms["broker"]
    # In a container the broker must bind every interface unless told otherwise.
    assert 'MILLRACE_BROKER_HOST="${MILLRACE_BROKER_HOST:-0.0.0.0}"' in arms["broker"]
    assert "celery -A control_plane worker -Q millrace" in arms["worker"]
    assert "celery -A control_plane beat" in arms["beat"]
    assert "manage.py migrate --noinput" in arms["migrate"]
    assert 'exec python /app/manage.py connect "$config"' in arms["connect"]
    assert "MILLRACE_BROKER_METRICS_PORT" in arms["healthcheck"]
    assert "connect_config healthcheck" in arms["healthcheck"]


def run_entrypoint(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # `python` in the script must be this interpreter.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**os.environ, "PATH": path, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_healthcheck_broker_asks_the_metrics_port():
    healthy = {"live": True}
    server = HealthServer(
        BrokerMetrics(),
        "127.0.0.1",
        0,
        live=lambda: healthy["live"],
        ready=lambda: (True, "ready"),
    )
    server.start()
    try:
        env = {"MILLRACE_BROKER_METRICS_PORT": str(server.port)}
        assert run_entrypoint("healthcheck", "broker", env=env).returncode == 0
        healthy["live"] = False  # /healthz answers 503
        assert run_entrypoint("healthcheck", "broker", env=env).returncode != 0
    finally:
        server.stop()
    assert run_entrypoint("healthcheck", "broker", env=env).returncode != 0  # nothing listens


@pytest.mark.parametrize("port", ["off", "0"])
def test_healthcheck_broker_needs_a_fixed_metrics_port(port):
    result = run_entrypoint("healthcheck", "broker", env={"MILLRACE_BROKER_METRICS_PORT": port})
    assert result.returncode != 0
    assert "no fixed broker metrics port" in result.stderr


def test_healthcheck_refuses_unknown_targets():
    assert run_entrypoint("healthcheck", "nonsense").returncode == 2


def dockerfile_stages() -> list[list[str]]:
    """Instructions per stage, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def instructions(stage: list[str], name: str) -> list[str]:
    return [line.split(None, 1)[1] for line in stage if line.split(None, 1)[0].upper() == name]


def test_dockerfile_is_multi_stage_with_a_non_root_final_stage():
    stages = dockerfile_stages()
    assert len(stages) >= 2
    assert " AS " in stages[0][0].upper()
    final = stages[-1]
    users = instructions(final, "USER")
    assert users, "the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert instructions(final, "HEALTHCHECK"), "the final stage has no HEALTHCHECK"
    assert instructions(final, "ENTRYPOINT") == ['["/app/docker/entrypoint.sh"]']
    exposed = {p for line in instructions(final, "EXPOSE") for p in line.split()}
    assert {"8000", "9092", "9093", "9644", "9809"} <= exposed


def test_dockerfile_final_stage_is_small():
    stages = dockerfile_stages()
    final = "\n".join(stages[-1])
    assert "-slim" in (DOCKER / "Dockerfile").read_text().split("ARG PYTHON_IMAGE=", 1)[1]
    for tool in ("build-essential", "gcc", "apt-get install"):
        assert tool not in final, f"{tool} in the final stage"
    builder = "\n".join(stages[0])
    assert "PIP_NO_CACHE_DIR=1" in builder or "--no-cache-dir" in builder
    assert "COPY --from=builder" in final


def compose() -> dict:
    return load_yaml(DOCKER / "compose.yaml")


def image_services() -> dict[str, dict]:
    return {name: svc for name, svc in compose()["services"].items() if svc.get("image") == IMAGE}


def test_compose_services_using_the_image_run_entrypoint_roles():
    services = image_services()
    roles_run = {"migrate", "web", "worker", "beat", "connect"}
    assert roles_run | {"broker-1", "broker-2", "broker-3"} <= set(services)
    roles = entrypoint_roles()
    for name, svc in services.items():
        command = svc.get("command")
        assert isinstance(command, list) and command, f"{name} has no command"
        assert command[0] in roles, f"{name} runs {command[0]!r}, not a role"


def test_compose_health_checks_match_the_roles():
    for name, svc in image_services().items():
        role = svc["command"][0]
        check = svc.get("healthcheck")
        if role == "web":
            assert check is None or not check.get("disable"), "web keeps the image's check"
        elif role in ("broker", "connect"):
            assert check["test"] == ["CMD", "/app/docker/entrypoint.sh", "healthcheck", role]
        else:
            # The image's HEALTHCHECK asks the web port, which no other role serves.
            assert check == {"disable": True}, name


def seconds(duration: str) -> int:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert match and duration, duration
    return int(match.group(1) or 0) * 60 + int(match.group(2) or 0)


def test_compose_brokers():
    doc = compose()
    brokers = {n: s for n, s in image_services().items() if s["command"] == ["broker"]}
    assert set(brokers) == {"broker-1", "broker-2", "broker-3"}
    ids = set()
    for name, svc in brokers.items():
        env = svc["environment"]
        ids.add(env["MILLRACE_BROKER_ID"])
        assert env["MILLRACE_BROKER_ID"] == name.rsplit("-", 1)[1]
        assert env["MILLRACE_BROKER_ADVERTISED_HOST"] == name
        volume, mount = svc["volumes"][0].split(":")
        assert mount == "/var/lib/millrace"
        assert volume in doc["volumes"]
        for port in svc["ports"]:
            assert port.startswith("127.0.0.1:"), port
            assert port.endswith(":9092")
        assert seconds(svc["stop_grace_period"]) >= 60
    assert len(ids) == 3


def test_compose_shares_secrets_across_every_process():
    services = image_services()
    for key in ("SECRET_KEY", "MILLRACE_INTERNAL_SECRET", "DATABASE_URL", "REDIS_URL"):
        values = {svc["environment"][key] for svc in services.values()}
        assert len(values) == 1, f"{key} differs between services: {values}"
