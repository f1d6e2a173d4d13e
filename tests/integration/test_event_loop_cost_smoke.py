"""``python -m bench.event_loop_cost`` runs end to end (a tiny run, no figures checked): one
participant on each loop answers every command over its lane, and its topic is gone after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.kafka import run_sync, topic_names

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_event_loop_cost_smoke(pg_url: str, kafka_bootstrap: str) -> None:
    root = Path(__file__).resolve().parents[2]
    before = run_sync(topic_names(kafka_bootstrap))
    out = subprocess.run(
        [sys.executable, "-m", "bench.event_loop_cost", "--sagas", "20", "--rounds", "1",
         "--inflight", "1,4", "--postgres", pg_url, "--kafka", kafka_bootstrap],
        cwd=root, env=dict(os.environ), capture_output=True, text=True, timeout=110,
        check=True)
    result = json.loads(out.stdout)
    assert set(result["runs"]) == {"asyncio@1", "uvloop@1", "asyncio@4", "uvloop@4"}
    for runs in result["runs"].values():
        assert runs[0]["commands_per_s"] > 0 and runs[0]["cpu_us_per_command"] >= 0
    assert set(result["summary"]) == {"1 in flight", "4 in flight"}
    assert not {t for t in run_sync(topic_names(kafka_bootstrap)) - before
                if t.endswith(".payments.commands")}
