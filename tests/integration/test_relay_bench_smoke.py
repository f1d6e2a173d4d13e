"""The relay benches' harnesses run end to end (tiny runs, no figures checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_relay_throughput_smoke(pg_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.relay_throughput",
            "--smoke",
            "--out",
            str(tmp_path),
            "--postgres",
            pg_url,
            "--kafka",
            kafka_bootstrap,
        ],
        cwd=root,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    assert "ratio:" in out.stdout
    (result,) = tmp_path.glob("relay_throughput-smoke-*.json")
    data = json.loads(result.read_text())
    assert data["relay_msg_per_s"] > 0 and data["raw_msg_per_s"] > 0
    assert len(data["rounds"]) == 2  # both orders: relay first, then raw first


def test_outbox_notify_smoke(pg_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-m", "bench.outbox_notify", "--smoke", "--out", str(tmp_path),
         "--postgres", pg_url, "--kafka", kafka_bootstrap],
        cwd=root, env=dict(os.environ), capture_output=True, text=True, timeout=50, check=True,
    )
    (result,) = tmp_path.glob("outbox_notify-smoke-*.json")
    data = json.loads(result.read_text())
    assert set(data["writer_rate_ratio_to_plain"]) == {"plain", "notify", "waker"}
    assert all(data["pickup"][mode]["p50_ms"] >= 0 for mode in ("plain", "notify", "waker"))
