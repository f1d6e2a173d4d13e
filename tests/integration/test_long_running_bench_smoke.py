"""``python -m bench.long_running`` at a small scale: the issue's scale harness (copies,
worker RSS, checkpoint, firing from two processes, signals through the API and Kafka) runs
end to end and every figure line is printed (a harness check, not speed)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.support.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def run_bench(args: list[str], timeout: float) -> tuple[int, str, str]:
    """The bench's exit code, stdout and stderr. Past ``timeout`` it gets SIGINT first, so its
    own clean-up stops the worker and API processes it started in their own sessions."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "bench.long_running", *args], cwd=root,
                            env=dict(os.environ), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise AssertionError(
            f"bench.long_running ran past {timeout}s:\n{out}\n{err[-3000:]}") from None
    return proc.returncode, out, err


def test_long_running_bench_fires_every_due_copy_and_measures_signals(
    pg_url: str, kafka_bootstrap: str
) -> None:
    code, out, err = run_bench(
        ["--postgres", pg_url, "--kafka", kafka_bootstrap, "--sagas", "800", "--due", "600",
         "--processes", "2", "--limit", "100", "--signals", "30", "--port", str(free_port())],
        timeout=110)
    assert code == 0, out[-3000:] + err[-3000:]
    assert "800 sagas (500 started, the rest copied" in out
    assert re.search(r"worker RSS : \d+ MiB with no sagas, \d+ MiB with 800 asleep", out)
    assert "checkpoint : " in out
    # Every due copy fires and sends its command; the later ones stay asleep.
    assert "600 of them due together" in out and "; 600 commands;" in out, out
    assert "20/20 sampled sagas replay to their snapshot" in out
    assert re.search(r"0 written by backends", out), out
    for way in ("API", "Kafka"):
        assert re.search(rf"signals {way}\s*: 30 in [\d.]+s", out), out
