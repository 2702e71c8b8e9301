"""The short soak CI runs: ``manage.py up`` on embedded defaults under load, beside a
CPU-burning neighbour, for a minute (``make soak`` runs the same for 30 minutes), with a
connector the Connect fleet runs copying the load's topic to a file."""

from __future__ import annotations

import json

import pytest

from bench import soak

pytestmark = pytest.mark.slow


def test_up_stays_up_under_load_beside_a_noisy_neighbour(tmp_path):
    lines: list[str] = []
    summary = soak.run(
        seconds=60, burners=1, rate=100, report_every=20, data_dir=tmp_path, emit=lines.append
    )
    assert json.loads(lines[-1]) == summary
    # Each check on its own, so a failure names what broke.
    assert summary["up_stayed_up"], summary
    assert summary["up_exit_code"] == 0, summary
    assert summary["restarts"] == 0, summary
    assert summary["fenced"] == 0, summary
    assert summary["lost"] == 0, summary
    assert summary["duplicates"] == 0, summary
    assert summary["out_of_order"] == 0, summary
    assert summary["produce_errors"] == 0, summary
    assert summary["acked_per_s"] >= 90, summary
    assert summary["max_queue_depth"] < 100, summary
    # The Connect fleet copied every acknowledged record to the file sink's file.
    assert summary["connect_copy_missing"] == 0, summary
    assert summary["connect_copy_lines"] >= summary["acked"] > 0, summary
    # Usage metering counted every acknowledged record (summed after the stop).
    assert summary["metering_missing"] == 0, summary
    assert summary["metered_records"] >= summary["acked"], summary
    assert summary["ok"], summary
