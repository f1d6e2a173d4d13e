"""``python -m bench --smoke`` runs every phase end to end (a harness check, not speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.stack import KAFKA_BROKER

pytestmark = [pytest.mark.integration, pytest.mark.timeout(330)]


def test_bench_smoke(pg_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    out_file = tmp_path / "smoke.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--postgres", pg_url,
         "--kafka", kafka_bootstrap, "--output", str(out_file)],
        cwd=root, env=dict(os.environ), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sustained sagas/s" in proc.stdout
    data = json.loads(out_file.read_text())

    limits = data["limits"]
    assert limits["postgres"]["rate"] > 0
    assert limits["kafka"]["stream_rate"] > 0
    assert limits["kafka"]["round_trip_ms"]["p50"] > 0

    closed = data["e2e"]["closed_loop"]
    assert closed["rate"] > 0
    assert closed["costs"]["pg_xacts_per_saga_total"] > 0
    assert closed["costs"]["kafka_per_saga"]["commands"] > 0
    assert closed["costs"]["kafka_per_saga"]["replies"] > 0
    assert set(closed["statuses"]) <= {"completed", "compensated", "cancelled"}
    assert closed["statuses"].get("completed", 0) > 0
    open_loop = data["e2e"]["open_loop"]
    assert open_loop["sagas"] > 0
    assert set(open_loop["latency_ms"]) >= {"p50", "p95", "p99"}

    assert set(data["scale_steps"]) == {"1", "3", "6"}
    assert all(point["rate"] > 0 for point in data["scale_steps"].values())
    assert data["replicas"]["coordinators"] == 2 and data["replicas"]["rate"] > 0

    memory = data["coordinator_memory"]
    assert memory["running_in_db"] == memory["sagas"] > 0
    assert memory["rss_before_mb"] > 0 and memory["rss_after_mb"] > 0

    latency = data["latency"]["this"]
    for saga in ("bench_tcc3", "bench_steps3"):
        one = latency["sagas"][saga]["one"]
        assert one["rate"] > 0 and one["latency_ms"]["p50"] > 0
        # The workers' saga-end hints reach the driver, which polls on them.
        assert one["noticed_ms"]["count"] > 0 and one["noticed_ms"]["p50"] >= 0
        # The per-hop split is measured even at one saga in flight (it used to read nothing).
        assert one["hop_breakdown"]["hops_measured"] > 0
        assert one["hop_breakdown"]["participant_txn_ms"]["count"] > 0
        assert one["hop_breakdown"]["timeline"].count(" c ") >= 3
        # Each leg of the split has its floor, measured with bare clients in the same run.
        floors = latency["sagas"][saga]["leg_floors"]
        assert floors["kafka"]["one_way_ms"] > 0 and floors["postgres"]["commit_ms"] > 0
        legs = ("relay", "to_participant", "participant_txn", "to_coordinator", "hop")
        assert all(floors["legs_ms"][leg] > 0 for leg in legs)
        assert latency["sagas"][saga]["open_20"]["hop_breakdown"]["hops_measured"] > 0
        # Where the CPU goes: every database's round trips, the local broker's CPU, and the
        # bare CPU of a round trip and of a message, one at a time.
        costs = latency["sagas"][saga]["sixteen"]["costs"]
        trips = costs["pg_round_trips_per_saga"]
        assert set(trips) == {"coordinator", "payments", "inventory", "shipping"}
        assert all(v > 0 for v in trips.values())
        assert costs["cpu_ms_per_saga"][KAFKA_BROKER] > 0
        for key in ("backend_cpu_us_per_round_trip", "client_cpu_us_per_round_trip"):
            assert floors["postgres"][key] > 0
        for key in ("producer", "consumer"):
            assert floors["kafka"][f"{key}_cpu_us_per_message"] > 0
        # Found and measured; the smoke's 5 counted pings fit in one 10 ms clock tick of the
        # broker's CPU, less its idle background, so 0 is a possible reading here.
        assert floors["kafka"]["broker_cpu_us_per_message"] is not None
        assert floors["kafka"]["broker_cpu_us_per_message"] >= 0
    assert latency["idle"]["window_s"] > 0
    assert set(latency["idle"]["db_transactions_per_s"]) == {
        "coordinator", "payments", "inventory", "shipping"}
    assert "one_p50_le_15ms" in latency["targets"]

    assert data["ratios"]["saga_rate_over_pg_write_rate"] > 0
    assert {"sustained_ge_300_per_s", "p50_le_50_ms", "p99_le_250_ms",
            "rss_lt_200_mb"} <= set(data["targets"])
