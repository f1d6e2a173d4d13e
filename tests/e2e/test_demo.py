"""The README's main command: the whole demo stack in separate processes on real services."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_demo_runs_one_order_to_completion_and_one_to_compensation(
    pg_url: str, kafka_bootstrap: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--postgres", pg_url, "--kafka", kafka_bootstrap,
         "--once"],
        capture_output=True, text=True, timeout=240, check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "== order that completes" in out and "-> completed" in out
    assert "== order that compensates" in out and "-> compensated" in out
    assert "inventory reserve_stock.try -> rejected (out of stock)" in out
    assert out.count("equals snapshot: True") == 2
    assert "captured alice 2500" in out and "released alice 4000" in out
    assert "exit 0" in out and "exit -" not in out
