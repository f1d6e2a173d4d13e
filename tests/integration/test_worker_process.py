"""``python -m coordinator``: migrate, a worker stopped by SIGTERM, verify and compact."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest

from coordinator.migrations import discover
from coordinator.store import SagaStore
from participant_sdk.protocol import reply_topic
from tests.integration.test_store_support import make_registry
from tests.integration.test_worker_support import create_topics

pytestmark = pytest.mark.integration

SAGA = "tests.integration.test_store_support:TccOrder"


async def run_cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coordinator", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_migrate_worker_sigterm_verify_compact(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    code, out = await run_cli("migrate", "--dsn", fresh_db)
    every = [m.version for m in discover()]
    assert code == 0 and f"applied migrations: {every}" in out, out
    code, out = await run_cli("migrate", "--dsn", fresh_db)
    assert code == 0 and "up to date" in out, out

    await create_topics(kafka_bootstrap, {reply_topic(topic_prefix): 1})
    env = {**os.environ, "SAGAFLOW_SAGAS": SAGA, "SAGAFLOW_KAFKA_BOOTSTRAP": kafka_bootstrap}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coordinator", "worker", "--dsn", fresh_db,
        "--topic-prefix", topic_prefix, "--group-id", f"{topic_prefix}-g",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while not any("started" in line for line in lines):
        assert time.monotonic() < deadline, lines
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line, lines
        lines.append(line.decode())
    proc.send_signal(signal.SIGTERM)
    rest, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, rest.decode()
    assert "stopped" in rest.decode()

    async with await SagaStore.open(fresh_db, make_registry(topic_prefix)) as store:
        saga_id = (await store.start_saga("tcc_order", {"order_id": "c", "amount": 1}))\
            .record.saga_id
    code, out = await run_cli("verify", str(saga_id), "--dsn", fresh_db, "--saga", SAGA)
    assert code == 0 and "ok" in out, out
    code, out = await run_cli("compact", str(saga_id), "--dsn", fresh_db, "--saga", SAGA)
    assert code == 0 and "checkpoint at seq 1" in out, out
    code, out = await run_cli("verify", "--dsn", fresh_db, "--saga", "nope:X", str(saga_id))
    assert code == 2 and "cannot import" in out, out
