"""``python -m bench.foreach_cost`` and ``python -m bench.foreach_e2e`` at tiny sizes: the
for-each cost harness keeps working (a harness check, never the speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_foreach_cost_smoke(pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    proc = _run("bench.foreach_cost", "--postgres", pg_url, "--sizes", "3,30",
                "--replies", "30", "--rounds", "1", "--json", str(out))
    assert "Postgres WAL bytes per reply" in proc.stdout
    data = json.loads(out.read_text())
    small, large = data["store"]["3"], data["store"]["30"]
    # Every command was answered: 10 sagas of 3 items, 1 saga of 30.
    assert (small["sagas"], small["replies"]) == (10, 30)
    assert (large["sagas"], large["replies"]) == (1, 30)
    for figures in (small, large):
        assert figures["wal_bytes_per_reply"] > 0
        assert figures["cpu_us_per_reply"] > 0
        assert figures["wall_us_per_reply"] > 0
    # The stored state holds every item's node, so ten times the items is a larger state.
    assert large["state_bytes_final"] > 2 * small["state_bytes_final"] > 0
    engine = data["engine"]
    assert engine["3"]["replies"] == engine["30"]["replies"] == 30
    assert engine["30"]["advance_us_per_reply"] > 0
    paths = data["paths"]
    for path in ("forward", "confirm", "rollback", "repair"):
        assert paths["us_per_event"][path]["30"] > 0
        # Ten items in flight at most on every path, and the saga's last step beside them.
        assert paths["largest_burst"][path]["30"] <= paths["concurrency"] + 1


def test_foreach_e2e_smoke(pg_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "e2e.json"
    proc = _run("bench.foreach_e2e", "--smoke", "--postgres", pg_url, "--kafka",
                kafka_bootstrap, "--json", str(out))
    assert "CPU ms per step, all processes" in proc.stdout
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == {"bench_tcc3", "bench_ship_each"}
    for figures in summary.values():
        assert figures["sagas_per_s"] > 0
        assert figures["cpu_ms_per_step_total"] > 0
        assert all(set(s) == {"completed"} for s in figures["statuses"])
    # The for-each's sagas really ran several items each through shipping (5 lines each).
    assert summary["bench_ship_each"]["replies_per_saga"] > 1.5
