"""The API served by ``python -m coordinator api`` (uvicorn, real Postgres): a schemathesis
fuzz run over every operation, and the ``saga`` CLI against it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from coordinator.cli.ops import main as saga_cli
from coordinator.store import SagaStore
from tests.integration.test_api_support import ADMIN, OPERATOR, TOKENS, VIEWER, make_dead
from tests.integration.test_store_support import ManualClock, make_registry, migrated

pytestmark = pytest.mark.integration

SAGAS = ["tests.integration.test_store_support:TccOrder",
         "tests.integration.test_store_support:ShipOrder"]
PREFIX = "apilive"


@dataclass
class Live:
    url: str
    dsn: str


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def served_api(dsn: str, sagas: list[str], tokens: str, prefix: str
                     ) -> AsyncIterator[Live]:
    """``python -m coordinator api`` on ``dsn`` (migrated) with these saga classes and
    tokens, until the block ends."""
    await migrated(dsn)
    port = _port()
    env = {**os.environ, "SAGAFLOW_API_TOKENS": tokens, "SAGAFLOW_API_RUN_JOBS": "true"}
    cmd = [sys.executable, "-m", "coordinator", "api", "--dsn", dsn, "--port", str(port),
           "--topic-prefix", prefix, *[a for s in sagas for a in ("--saga", s)]]
    proc = subprocess.Popen(  # noqa: ASYNC220 - a server we keep running, never wait on
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                try:
                    if (await client.get(f"{url}/openapi.json")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                await asyncio.sleep(0.1)
        yield Live(url, dsn)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
async def live(fresh_db: str) -> AsyncIterator[Live]:
    async with served_api(fresh_db, SAGAS, TOKENS, PREFIX) as served:
        yield served


@pytest.fixture
async def seeded_store(live: Live) -> AsyncIterator[tuple[SagaStore, ManualClock]]:
    clock = ManualClock()
    async with await SagaStore.open(live.dsn, make_registry(PREFIX), max_size=2,
                                    clock=clock) as store:
        yield store, clock


#: Fuzzing bounds: deterministic, and short enough for CI (about a minute here).
FUZZ_EXAMPLES = int(os.environ.get("SAGAFLOW_FUZZ_EXAMPLES", "10"))
FUZZ_CONFIG = Path(__file__).with_name("schemathesis.toml")


async def test_schemathesis_finds_no_server_error_or_schema_violation(
    live: Live, seeded_store: tuple[SagaStore, ManualClock], tmp_path: Path,
) -> None:
    """Every check schemathesis has (server errors, status codes, content types, headers,
    response schemas, the ``Allow`` header of 405s, valid requests refused, invalid ones
    accepted, auth, ...) over every operation and every phase (examples, coverage, fuzzing,
    stateful), as an admin, in deterministic mode."""
    store, clock = seeded_store
    await make_dead(store, clock, 2)
    await store.start_saga("tcc_order", {"order_id": "x", "amount": 1})
    report = tmp_path / "report.json"
    argv = [str(Path(sys.executable).with_name("schemathesis")), "--config-file",
            str(FUZZ_CONFIG), "run", f"{live.url}/openapi.json", "--checks", "all",
            "-H", f"Authorization: Bearer {ADMIN}", "--max-examples", str(FUZZ_EXAMPLES),
            "--generation-deterministic", "--no-shrink", "--workers", "1", "--no-color",
            "--report", "json",
            "--report-json-path", str(report)]
    done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True,
                                   timeout=300, check=False, cwd=tmp_path)
    summary = done.stdout[done.stdout.rfind("SUMMARY"):]
    print(summary)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-2000:]
    assert "Tested: 46" in summary or "Tested:" in summary, summary


def _cli(live: Live, *argv: str, token: str = OPERATOR) -> tuple[int, str]:
    out = io.StringIO()
    code = saga_cli(["--url", live.url, "--token", token, *argv], out=out)
    return code, out.getvalue()


async def test_cli_mirrors_the_api(live: Live,
                                   seeded_store: tuple[SagaStore, ManualClock]) -> None:
    store, clock = seeded_store
    a, b, c = await make_dead(store, clock, 3)

    def scenario() -> None:
        code, text = _cli(live, "dead")
        assert code == 0 and str(a) in text and "SAGA_ID" in text
        code, text = _cli(live, "--json", "list", "--status", "dead", "--limit", "2")
        page = json.loads(text)
        assert code == 0 and len(page["items"]) == 2 and page["next_cursor"]
        code, text = _cli(live, "show", str(a))
        assert code == 0 and "status   dead" in text
        code, text = _cli(live, "cancel", str(a), "--reason", "stop")
        assert code == 1
        code, text = _cli(live, "retry", str(a), "--reason", "fixed", "--payload", '{"x": 1}')
        assert code == 0 and "compensating" in text
        code, text = _cli(live, "history", str(a))
        assert code == 0 and "operator:olga" in text and "fixed" in text
        code, text = _cli(live, "diagram", str(a))
        assert code == 0 and text.startswith("stateDiagram-v2")
        code, text = _cli(live, "resolve", str(b), "-r", "by hand", "--status", "compensated")
        assert code == 0 and "compensated" in text
        code, text = _cli(live, "--json", "bulk", "resolve", "--status", "dead", "-r", "bulk")
        job = json.loads(text)
        assert code == 0 and job["total"] == 1
        for _ in range(100):
            code, text = _cli(live, "--json", "job", job["job_id"], token=VIEWER)
            if json.loads(text)["status"] == "done":
                break
            time.sleep(0.1)
        assert json.loads(text)["counts"] == {"applied": 1}
        code, text = _cli(live, "skip", str(c), "-r", "x", token=VIEWER)
        assert code == 1
        code, text = _cli(live, "verify", str(a), token=VIEWER)
        assert code == 0 and f"saga {a} replays to its snapshot" in text
        code, text = _cli(live, "--json", "bulk-verify", "--type", "ship_order", "-r", "audit")
        job = json.loads(text)
        assert code == 0 and job["total"] == 3 and job["reason"] == "audit"
        for _ in range(100):
            code, text = _cli(live, "--json", "verify-job", job["job_id"], token=VIEWER)
            if json.loads(text)["status"] == "done":
                break
            time.sleep(0.1)
        assert json.loads(text)["counts"] == {"verified": 3}
        code, text = _cli(live, "verify-job", job["job_id"], token=VIEWER)
        assert code == 0 and "verb     verify by olga" in text and "verified" in text
        code, text = _cli(live, "types")
        assert code == 0 and "ship_order" in text
        code, text = _cli(live, "dead-letters", "list")
        assert code == 0 and "(none)" in text
        code, text = _cli(live, "dead-letters", "discard", "5", token=ADMIN)
        assert code == 1

    await asyncio.to_thread(scenario)


def test_cli_reports_connection_errors() -> None:
    out = io.StringIO()
    assert saga_cli(["--url", f"http://127.0.0.1:{_port()}", "list"], out=out) == 2



async def test_health_and_readiness_need_no_token(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.url) as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


async def test_sagas_are_found_by_the_first_digits_of_their_id(
    live: Live, seeded_store: tuple[SagaStore, ManualClock]
) -> None:
    store, _ = seeded_store
    twin_a, twin_b, single = (UUID("abcdef00-0000-4000-8000-000000000001"),
                              UUID("abcdef00-0000-4000-8000-000000000002"),
                              UUID("12345678-0000-4000-8000-000000000003"))
    for saga_id in (twin_a, twin_b, single):
        await store.start_saga("ship_order", {"order_id": str(saga_id), "amount": 1},
                               saga_id=saga_id)
    headers = {"Authorization": f"Bearer {VIEWER}"}
    async with httpx.AsyncClient(base_url=live.url, headers=headers) as client:
        found = (await client.get("/sagas", params={"id_prefix": "ABCDEF00-0"})).json()
        assert {i["saga_id"] for i in found["items"]} == {str(twin_a), str(twin_b)}
        for bad in ("zz", "abc", "-1234"):  # not hex, under 4 digits, not how ids start
            assert (await client.get("/sagas", params={"id_prefix": bad})).status_code == 422
        too_long = await client.get("/sagas", params={"id_prefix": "a" * 33})
        assert too_long.status_code == 400
        assert too_long.json()["error"]["code"] == "invalid_id_prefix"

    def scenario() -> None:
        code, text = _cli(live, "show", "1234")
        assert code == 0 and f"saga     {single}" in text
        code, text = _cli(live, "history", "abcdef00-0000-4000-8000-00000000000", token=VIEWER)
        assert code == 1
        code, text = _cli(live, "verify", "abcdef00000040008000000000000002", token=VIEWER)
        assert code == 0 and f"saga {twin_b} replays" in text
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert _cli(live, "show", "abcdef", token=VIEWER)[0] == 1
            assert _cli(live, "show", "ffff", token=VIEWER)[0] == 1
            assert _cli(live, "show", "12", token=VIEWER)[0] == 1
        assert "'abcdef' starts more than one saga id" in err.getvalue()
        assert ("no saga has the business key '12' (nor is it an id or the first hex digits "
                "of one, at least 4)") in err.getvalue()
        assert "no saga id starts with 'ffff', and no saga has it as business key" in (
            err.getvalue())

    await asyncio.to_thread(scenario)
