"""Paths and loaders shared by the deployment tests (no database, no Docker, no cluster)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "millrace"
TEMPLATES = CHART / "templates"
DOCKER = ROOT / "docker"

# The roles of docs' interface table: `docker/entrypoint.sh <role>`.
ROLES = {"web", "broker", "worker", "beat", "migrate", "connect", "healthcheck"}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def chart_values() -> dict[str, Any]:
    values = load_yaml(CHART / "values.yaml")
    assert isinstance(values, dict)
    return values


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of a values file onto values.yaml: maps merge, everything else replaces."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
