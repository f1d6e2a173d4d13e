"""Every command's start-up failure is one line on stderr that names the cause and the setting
to change, with the cause's exit code (2 settings, 3 Postgres, 4 Kafka; docs/operations.md),
and no traceback: the real commands, in their own processes, against the real Postgres and
Kafka or a closed port on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAGA = "examples.order_saga:OrderSaga"
AN_ID = "00000000-0000-4000-8000-000000000001"

#: Each command as its user types it, and how it names its Postgres and Kafka settings.
COMMANDS: dict[str, tuple[list[str], str, str | None]] = {
    "worker": (["-m", "coordinator", "worker", "--saga", SAGA], "SAGAFLOW_DSN",
               "SAGAFLOW_KAFKA_BOOTSTRAP"),
    "api": (["-m", "coordinator", "api", "--port", "0", "--saga", SAGA], "SAGAFLOW_DSN", None),
    "migrate": (["-m", "coordinator", "migrate"], "SAGAFLOW_DSN", None),
    "verify": (["-m", "coordinator", "verify", "--saga", SAGA, AN_ID], "SAGAFLOW_DSN", None),
    "compact": (["-m", "coordinator", "compact", "--saga", SAGA], "SAGAFLOW_DSN", None),
    "topics": (["-m", "coordinator", "topics", "--saga", SAGA], "", "SAGAFLOW_KAFKA_BOOTSTRAP"),
    "relay": (["-m", "outbox_relay"], "SAGAFLOW_RELAY_POSTGRES_DSN",
              "SAGAFLOW_RELAY_KAFKA_BOOTSTRAP"),
    "barrier": (["-m", "participant_sdk", "install-barrier"], "SAGAFLOW_PARTICIPANT_DSN", None),
    "participant": (["-m", "examples.services.payments"], "SAGAFLOW_PARTICIPANT_DSN",
                    "SAGAFLOW_PARTICIPANT_KAFKA_BOOTSTRAP"),
}
PROG = {"relay": "sagaflow-relay", "barrier": "sagaflow-barrier", "participant": "payments"}
WITH_DB = [name for name, (_, db, _) in COMMANDS.items() if db]
WITH_KAFKA = [name for name, (_, _, kafka) in COMMANDS.items() if kafka]
WITH_SAGAS = ["worker", "api", "verify", "compact", "topics"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(name: str, **env: str) -> tuple[int, str, list[str]]:
    """Run command ``name``; its exit code, its error line and all of stderr."""
    argv, _, _ = COMMANDS[name]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLOW_")}
    done = subprocess.run([sys.executable, *argv], cwd=ROOT,
                          env={**clean, "SAGAFLOW_STARTUP_TIMEOUT": "1s", **env},
                          capture_output=True, text=True, timeout=90, check=False)
    lines = done.stderr.strip().splitlines()
    prefix = f"{PROG.get(name, 'sagaflow-coordinator')}: error: "
    errors = [line for line in lines if line.startswith(prefix)]
    assert not any("Traceback" in line for line in lines), done.stderr
    assert len(errors) == 1 and lines[-1] == errors[0], done.stderr
    return done.returncode, errors[0].removeprefix(prefix), lines


def db_env(name: str, dsn: str, kafka: str) -> dict[str, str]:
    _, db_var, kafka_var = COMMANDS[name]
    env = {db_var: dsn} if db_var else {}
    if kafka_var:
        env[kafka_var] = kafka
    return env


@pytest.mark.parametrize("name", WITH_DB)
def test_no_dsn_is_said_at_once(name: str, kafka_bootstrap: str) -> None:
    code, line, _ = run(name, **{k: v for k, v in db_env(name, "", kafka_bootstrap).items()
                                 if v})
    assert code == 2
    assert f"{COMMANDS[name][1]} " in line and "is not set" in line, line


@pytest.mark.parametrize("name", WITH_DB)
def test_an_unreachable_database(name: str, kafka_bootstrap: str) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    code, line, _ = run(name, **db_env(name, dsn, kafka_bootstrap))
    assert code == 3
    assert line.startswith("cannot reach Postgres") and COMMANDS[name][1] in line, line


@pytest.mark.parametrize("name", WITH_DB)
def test_a_missing_database(name: str, pg_url: str, kafka_bootstrap: str) -> None:
    missing = pg_url.rsplit("/", 1)[0] + f"/no_such_{uuid.uuid4().hex[:8]}"
    code, line, _ = run(name, **db_env(name, missing, kafka_bootstrap))
    assert code == 3
    assert line.startswith('Postgres: database "no_such_'), line
    assert line.endswith("at a database that exists)"), line
    assert COMMANDS[name][1] in line


@pytest.mark.parametrize("name", WITH_DB)
def test_a_refused_login(name: str, pg_url: str, kafka_bootstrap: str) -> None:
    scheme, rest = pg_url.split("://", 1)
    wrong = f"{scheme}://no_such_role_{uuid.uuid4().hex[:6]}@{rest.split('@', 1)[-1]}"
    code, line, _ = run(name, **db_env(name, wrong, kafka_bootstrap))
    assert code == 3
    assert line.startswith("Postgres refused the login"), line
    assert COMMANDS[name][1] in line


@pytest.mark.parametrize("name", WITH_KAFKA)
def test_an_unreachable_kafka(name: str, fresh_db: str) -> None:
    from tests.integration.test_store_support import migrated

    if name == "worker":
        import asyncio

        asyncio.run(migrated(fresh_db))
    code, line, _ = run(name, **db_env(name, fresh_db, f"127.0.0.1:{closed_port()}"))
    assert code == 4
    assert line.startswith("cannot reach Kafka") and COMMANDS[name][2] in line, line


@pytest.mark.parametrize("name", WITH_SAGAS)
def test_a_missing_sagas_module(name: str, pg_url: str, kafka_bootstrap: str) -> None:
    argv = COMMANDS[name][0]
    COMMANDS[name] = ([a.replace(SAGA, "no_such_module:Saga") for a in argv], *COMMANDS[name][1:])
    try:
        code, line, _ = run(name, **db_env(name, pg_url, kafka_bootstrap))
    finally:
        COMMANDS[name] = (argv, *COMMANDS[name][1:])
    assert code == 2
    assert "no_such_module" in line and "SAGAFLOW_SAGAS" in line, line


@pytest.mark.parametrize(("name", "variable", "value"), [
    ("worker", "SAGAFLOW_SHUTDOWN_GRACE", "PT1X"),
    ("api", "SAGAFLOW_API_JOB_LEASE", "a while"),
    ("migrate", "SAGAFLOW_POOL_MAX_SIZE", "0"),
    ("topics", "SAGAFLOW_KAFKA_SECURITY_PROTOCOL", "CARRIER_PIGEON"),
    ("relay", "SAGAFLOW_RELAY_PUBLISH_TIMEOUT", "30 seconds"),
    ("participant", "SAGAFLOW_PARTICIPANT_LANES", "0"),
    ("worker", "SAGAFLOW_STARTUP_TIMEOUT", "soon"),
])
def test_a_bad_setting(name: str, variable: str, value: str, pg_url: str,
                       kafka_bootstrap: str) -> None:
    code, line, _ = run(name, **db_env(name, pg_url, kafka_bootstrap), **{variable: value})
    assert code == 2
    assert line.startswith(f"{variable}: "), line


def test_a_bad_duration_is_explained(pg_url: str) -> None:
    code, line, _ = run("relay", SAGAFLOW_DSN=pg_url, SAGAFLOW_RELAY_PUBLISH_TIMEOUT="30 seconds")
    assert (code, line) == (2, "SAGAFLOW_RELAY_PUBLISH_TIMEOUT: not a duration: '30 seconds' "
                               "(use e.g. 250ms, 5s, 5m, 1h, 2d, plain seconds or ISO 8601 PT10S)")


def test_a_bad_token_spec(pg_url: str) -> None:
    code, line, _ = run("api", SAGAFLOW_DSN=pg_url, SAGAFLOW_API_TOKENS="alice:operator")
    assert (code, line) == (2, "SAGAFLOW_API_TOKENS / SAGAFLOW_API_TOKENS_FILE: token entry 1 "
                               "is not name:role:token")
