"""``python -m bench.long_running`` at a small scale: the issue's scale harness (copies,
worker RSS, checkpoint, firing from two processes, signals through the API and Kafka) runs
end to end and every figure line is printed (a harness check, not speed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_long_running_bench_fires_every_due_copy_and_measures_signals(
    pg_url: str, kafka_bootstrap: str
) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.long_running", "--postgres", pg_url,
         "--kafka", kafka_bootstrap, "--sagas", "800", "--due", "600", "--processes", "2",
         "--limit", "100", "--signals", "30", "--port", "28771"],
        cwd=root, env=dict(os.environ), capture_output=True, text=True, timeout=110,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "800 sagas (500 started, the rest copied" in out
    assert re.search(r"worker RSS : \d+ MiB with no sagas, \d+ MiB with 800 asleep", out)
    assert "checkpoint : " in out
    # Every due copy fires and sends its command; the later ones stay asleep.
    assert "600 of them due together" in out and "; 600 commands;" in out, out
    assert "20/20 sampled sagas replay to their snapshot" in out
    assert re.search(r"0 written by backends", out), out
    for way in ("API", "Kafka"):
        assert re.search(rf"signals {way}\s*: 30 in [\d.]+s", out), out
