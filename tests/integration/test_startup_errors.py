"""Each start-up mistake the issue lists ends in one line that says what to set, exit code 2,
no traceback: the real commands, in their own processes, against the real Postgres."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], **env: str) -> tuple[int, list[str]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLOW_")}
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stderr.strip().splitlines()


def test_a_missing_database(pg_url: str) -> None:
    missing = pg_url.rsplit("/", 1)[0] + f"/no_such_{uuid.uuid4().hex[:8]}"
    code, lines = _run(["-m", "coordinator", "migrate"], SAGAFLOW_DSN=missing)
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("sagaflow-coordinator: error: Postgres: database \"no_such_")
    assert lines[0].endswith("(create it, or point SAGAFLOW_DSN at a database that exists)")


def test_a_bad_token_spec() -> None:
    code, lines = _run(["-m", "coordinator", "api", "--saga", "examples.order_saga:OrderSaga"],
                       SAGAFLOW_API_TOKENS="alice:operator")
    assert code == 2
    assert lines == ["sagaflow-coordinator: error: SAGAFLOW_API_TOKENS / "
                     "SAGAFLOW_API_TOKENS_FILE: token entry 1 is not name:role:token"]


def test_a_missing_participant_dsn() -> None:
    code, lines = _run(["-m", "examples.services.payments"])
    assert code == 2
    assert lines[-1] == "payments: error: SAGAFLOW_PARTICIPANT_DSN is not set"
    assert not any("Traceback" in line for line in lines)


def test_a_bad_duration(pg_url: str) -> None:
    code, lines = _run(["-m", "outbox_relay"], SAGAFLOW_DSN=pg_url,
                       SAGAFLOW_RELAY_PUBLISH_TIMEOUT="30 seconds")
    assert code == 2
    assert lines == ["sagaflow-relay: error: SAGAFLOW_RELAY_PUBLISH_TIMEOUT: not a duration: "
                     "'30 seconds' (use e.g. 250ms, 5s, 5m, 1h, 2d, plain seconds or ISO 8601 "
                     "PT10S)"]
    code, lines = _run(["-m", "coordinator", "worker", "--saga", "examples.order_saga:OrderSaga"],
                       SAGAFLOW_DSN=pg_url, SAGAFLOW_SHUTDOWN_GRACE="PT1X")
    assert code == 2
    assert lines == ["sagaflow-coordinator: error: SAGAFLOW_SHUTDOWN_GRACE: not a duration: "
                     "'PT1X' (use e.g. 250ms, 5s, 5m, 1h, 2d, plain seconds or ISO 8601 PT10S)"]
