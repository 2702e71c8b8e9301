"""Who may import whom: data_plane's pure modules import no Django, Celery, Channels, DRF or
control_plane; the console does not reach into the REST API's views."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("django", "celery", "channels", "rest_framework", "control_plane", "kombu")
PURE = sorted(
    p
    for p in (ROOT / "data_plane").rglob("*.py")
    # Adapters that may touch Django live in data_plane/{broker,controller,...} later;
    # records, log, protocol, client and the top-level modules are pure.
    if p.parent == ROOT / "data_plane" or p.parts[-2] in {"records", "log", "protocol", "client"}
)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_there_are_pure_modules_to_check():
    assert PURE, "expected data_plane modules"


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports(path):
    bad = {m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_console_reads_role_tables_from_the_access_app_not_the_api_views():
    frontend = sorted((ROOT / "frontend").rglob("*.py"))
    assert frontend
    bad = set()
    for path in frontend:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if any(n.startswith("control_plane.api.views") for n in names):
                bad.add(str(path.relative_to(ROOT)))
    assert not bad, f"{sorted(bad)} import control_plane.api.views"


# The broker's ports, its in-memory store and its metadata cache are pure too: broker unit
# tests run them without Django.
BROKER_PURE = [
    ROOT / "data_plane" / "broker" / name
    for name in ("ports.py", "memory_store.py", "metadata_cache.py")
]


@pytest.mark.parametrize("path", BROKER_PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_broker_ports_are_pure(path):
    bad = {m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_only_the_broker_command_imports_brokerlink():
    """The Django adapters of the broker ports are the broker process's business alone."""
    brokerlink = ROOT / "control_plane" / "brokerlink"
    importers = sorted(
        str(p.relative_to(ROOT))
        for top in ("control_plane", "data_plane", "frontend")
        for p in (ROOT / top).rglob("*.py")
        if brokerlink not in p.parents
        and any(m.startswith("control_plane.brokerlink") for m in imported_modules(p))
    )
    assert importers == []


# The benchmarks and the load generator live in the top-level bench package; of the
# product, only the ``manage.py perf`` wrapper imports it.
PRODUCT = ("data_plane", "control_plane", "frontend")
BENCH_IMPORTERS = {Path("control_plane/ops/management/commands/perf.py")}


def test_the_product_imports_no_benchmark():
    found = {
        path.relative_to(ROOT)
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if any(m.split(".")[0] == "bench" for m in imported_modules(path))
    }
    assert found == BENCH_IMPORTERS


def test_the_product_packages_hold_no_benchmark_modules():
    names = {"bench", "perf"}
    found = [
        path.relative_to(ROOT)
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if path.stem.split("_")[0] in names and "management" not in path.parts
    ]
    assert found == []
