"""SIGTERM and SIGINT end every long-running process within two seconds, in every state:
starting (retrying an unreachable Postgres or Kafka: a closed port on 127.0.0.1), running
against the real services, retrying a database lost while running, and draining work that
cannot finish (the test holds a lock the process's work waits for).

Each process is a real OS process started as the deployment starts it. The clock starts when
the test sends the signal, after the process showed it reached the state under test, so the
interpreter's own start-up is not counted; the bound is the issue's 2 s plus 1 s for a loaded
2-core machine (the failures this guards against took 95 s and forever; every drain bound of
the settings used here is 3 s or more, so waiting for one also fails). The logs must show the
process took its graceful path: never the watchdog's hard exit, and no abandoned work except
when draining, where abandoning it after the grace is the point.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from examples.demo import database_names
from examples.stack import drop_database
from participant_sdk.conformance.wire import KitWire
from participant_sdk.direct import DirectClient
from participant_sdk.protocol import CommandEnvelope, Phase, encode, envelope_headers
from tests.chaos.conftest import MakeStack
from tests.chaos.support.proxy import TcpProxy
from tests.chaos.support.services import free_port
from tests.chaos.support.stack import ROOT, ChaosStack

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

#: The issue's two seconds, plus one for a loaded machine (see the module docstring).
BOUND = 3.0
WATCHDOG = "exiting now"
ABANDONED = "abandoning the work in flight"
RETRYING = "Retrying"  # tenacity's warning before each start-up retry
SAGA = "examples.order_saga:OrderSaga"


def closed() -> str:
    return f"127.0.0.1:{free_port()}"


async def wait_for_log(log: Path, mark: str, proc: subprocess.Popen[bytes],
                       within: float = 60) -> None:
    deadline = time.monotonic() + within
    while mark not in read(log):
        assert proc.poll() is None, f"exited {proc.returncode} before {mark!r}:\n{tail(log)}"
        assert time.monotonic() < deadline, f"no {mark!r} within {within}s:\n{tail(log)}"
        await asyncio.sleep(0.1)


def read(log: Path) -> str:
    return log.read_text(errors="replace")


def tail(log: Path, lines: int = 25) -> str:
    return "\n".join(read(log).splitlines()[-lines:])


async def stop(proc: subprocess.Popen[bytes], sig: signal.Signals, log: Path,
               *, draining: bool = False) -> float:
    """Send ``sig``; the seconds until the process exited. Asserts the exit code and that
    the graceful path was taken."""
    began = time.monotonic()
    proc.send_signal(sig)
    while proc.poll() is None and time.monotonic() - began < 30:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    took = time.monotonic() - began
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        pytest.fail(f"still running 30s after {sig.name}:\n{tail(log)}")
    text = read(log)
    assert proc.returncode == 0, f"exit {proc.returncode} after {sig.name}:\n{tail(log)}"
    assert WATCHDOG not in text, tail(log)
    assert draining or ABANDONED not in text, tail(log)
    assert took < BOUND, f"{took:.2f}s after {sig.name}:\n{tail(log)}"
    return took


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLOW_")}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, *argv], cwd=ROOT,
                                env={**clean, "PYTHONUNBUFFERED": "1", **env},
                                stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
async def stack(make_stack: MakeStack) -> AsyncIterator[ChaosStack]:
    yield await make_stack(sagas=(SAGA,))


def process_argv(kind: str, stack: ChaosStack) -> tuple[list[str], dict[str, str]]:
    """How the stack starts ``kind``: its arguments and environment."""
    define = {"worker": stack.coordinator, "relay": stack.relay,
              "participant": lambda: stack.participant("payments")}[kind]
    proc = define()
    return proc.argv[1:], dict(proc.env)


DB_VAR = {"worker": "SAGAFLOW_DSN", "relay": "SAGAFLOW_RELAY_POSTGRES_DSN",
          "participant": "SAGAFLOW_PARTICIPANT_DSN", "api": "SAGAFLOW_DSN"}
KAFKA_VAR = {"worker": "SAGAFLOW_KAFKA_BOOTSTRAP", "relay": "SAGAFLOW_RELAY_KAFKA_BOOTSTRAP",
             "participant": "SAGAFLOW_KAFKA_BOOTSTRAP"}
SERVING = {"worker": "worker started", "relay": "live relays", "participant": "consuming",
           "api": "Uvicorn running"}


def api_argv(stack: ChaosStack) -> tuple[list[str], dict[str, str]]:
    return (["-m", "coordinator", "api", "--port", str(free_port()), "--saga", SAGA],
            {"SAGAFLOW_DSN": stack.proc_dsn("coordinator"), "SAGAFLOW_TOPIC_PREFIX": stack.prefix,
             "SAGAFLOW_KAFKA_BOOTSTRAP": stack.proc_kafka,
             "SAGAFLOW_API_TOKENS": "ada:admin:stop-test-token"})


def argv_of(kind: str, stack: ChaosStack) -> tuple[list[str], dict[str, str]]:
    return api_argv(stack) if kind == "api" else process_argv(kind, stack)


def pg_address(dsn: str, address: str) -> str:
    scheme, rest = dsn.split("://", 1)
    creds, _, tail_ = rest.partition("@")
    return f"{scheme}://{creds}@{address}/{tail_.split('/', 1)[1]}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("kind", ["worker", "relay", "participant", "api"])
async def test_stop_while_postgres_is_unreachable(stack: ChaosStack, tmp_path: Path, kind: str,
                                                  sig: signal.Signals) -> None:
    argv, env = argv_of(kind, stack)
    env[DB_VAR[kind]] = pg_address(env[DB_VAR[kind]], closed())
    log = tmp_path / f"{kind}.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, RETRYING, proc)
    await asyncio.sleep(1.5)  # into a backoff sleep, not just past the first attempt
    print(f"{kind} stopped {await stop(proc, sig, log):.2f}s after {sig.name} while retrying")


@pytest.mark.parametrize("kind", ["worker", "relay", "participant"])
async def test_stop_while_kafka_is_unreachable(stack: ChaosStack, tmp_path: Path,
                                               kind: str) -> None:
    argv, env = argv_of(kind, stack)
    env[KAFKA_VAR[kind]] = closed()
    log = tmp_path / f"{kind}.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, RETRYING, proc)
    await asyncio.sleep(1.5)
    print(f"{kind} stopped {await stop(proc, signal.SIGTERM, log):.2f}s while Kafka was down")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("kind", ["worker", "relay", "participant", "api"])
async def test_stop_while_running(stack: ChaosStack, tmp_path: Path, kind: str,
                                  sig: signal.Signals) -> None:
    argv, env = argv_of(kind, stack)
    log = tmp_path / f"{kind}.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, SERVING[kind], proc)
    await asyncio.sleep(1.0)
    print(f"{kind} stopped {await stop(proc, sig, log):.2f}s after {sig.name} while running")


LOST = {"worker": "firing timers failed", "relay": "transient postgres failure"}


@pytest.mark.parametrize("kind", ["worker", "relay"])
async def test_stop_while_retrying_a_lost_database(make_stack: MakeStack, pg_url: str,
                                                   tmp_path: Path, kind: str) -> None:
    host, port = pg_url.split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)
    async with TcpProxy(host, int(port)) as proxy:
        stack = await make_stack(sagas=(SAGA,),
                                 proc_pg_url=f"postgresql://postgres@127.0.0.1:{proxy.port}/x")
        argv, env = argv_of(kind, stack)
        if kind == "worker":
            env["SAGAFLOW_TIMER_MAX_IDLE"] = "0.2"  # so that it queries, and finds it gone
        log = tmp_path / f"{kind}.log"
        proc = spawn(argv, env, log)
        await wait_for_log(log, SERVING[kind], proc)
        proxy.refuse(3600)
        await wait_for_log(log, LOST[kind], proc)
        await asyncio.sleep(1.0)  # into its retry back-off
        took = await stop(proc, signal.SIGTERM, log)
    print(f"{kind} stopped {took:.2f}s after SIGTERM while its database was gone")


async def hold(dsn: str, table: str) -> asyncpg.Connection:
    """A connection holding ``table`` locked against everyone until it closes."""
    conn = await asyncpg.connect(dsn)
    await conn.execute("BEGIN")
    await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # a fixed name
    return conn


async def test_stop_while_the_worker_drains(stack: ChaosStack, tmp_path: Path) -> None:
    argv, env = argv_of("worker", stack)
    env["SAGAFLOW_TIMER_MAX_IDLE"] = "0.2"  # the timer loop queries every 0.2 s
    log = tmp_path / "worker.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, SERVING["worker"], proc)
    locker = await hold(stack.dsn("coordinator"), "timers")
    try:
        await asyncio.sleep(1.0)  # the timer loop is now waiting for the lock
        took = await stop(proc, signal.SIGTERM, log, draining=True)
    finally:
        await locker.close()
    assert ABANDONED in read(log), tail(log)
    print(f"worker stopped {took:.2f}s after SIGTERM while its timer loop was blocked")


async def test_stop_while_the_relay_drains(stack: ChaosStack, tmp_path: Path) -> None:
    argv, env = argv_of("relay", stack)
    log = tmp_path / "relay.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, SERVING["relay"], proc)
    locker = await hold(stack.dsn("coordinator"), "sagaflow_outbox")
    try:
        await asyncio.sleep(1.0)  # its claim now waits for the lock
        took = await stop(proc, signal.SIGTERM, log, draining=True)
    finally:
        await locker.close()
    assert ABANDONED in read(log), tail(log)
    print(f"relay stopped {took:.2f}s after SIGTERM while its claim was blocked")


async def test_stop_while_a_participant_drains(stack: ChaosStack, tmp_path: Path) -> None:
    argv, env = argv_of("participant", stack)
    log = tmp_path / "payments.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, SERVING["participant"], proc)
    locker = await hold(stack.dsn("payments"), "payments_accounts")
    try:
        async with KitWire(stack.kafka_admin, stack.prefix, "payments") as wire:
            await wire.send(CommandEnvelope(
                message_id=uuid.uuid4(), saga_id=uuid.uuid4(), saga_type="order",
                step="charge", phase=Phase.TRY, attempt=1, participant="payments",
                action="charge", payload={"customer": "c", "amount": 1},
                reply_to=wire.reply_topic))
            await wait_for_log(log, "assigned", proc)
            await asyncio.sleep(2.0)  # the command is in flight, waiting for the lock
            took = await stop(proc, signal.SIGTERM, log, draining=True)
    finally:
        await locker.close()
    assert ABANDONED in read(log), tail(log)
    print(f"participant stopped {took:.2f}s after SIGTERM with a command in flight")


async def test_stop_a_participant_whose_direct_lane_is_busy(stack: ChaosStack,
                                                            tmp_path: Path) -> None:
    """A coordinator's lane connection stays open and a command on it waits for a lock: the
    participant gives the command half a second, then stops without the stop having to
    abandon anything, and the coordinator gets no answer (it then sends the command over
    Kafka), not a hang."""
    address = closed()
    argv, env = argv_of("participant", stack)
    env.update(SAGAFLOW_PARTICIPANT_DIRECT_LISTEN=address, SAGAFLOW_DIRECT_TOKEN="t")
    log = tmp_path / "payments.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, "direct lane on", proc)
    locker = await hold(stack.dsn("payments"), "payments_accounts")
    client = DirectClient(address, token="t", timeout=20)
    try:
        saga = uuid.uuid4()
        command = CommandEnvelope(
            message_id=uuid.uuid4(), saga_id=saga, saga_type="order", step="charge",
            phase=Phase.TRY, attempt=1, participant="payments", action="charge",
            payload={"customer": "c", "amount": 1}, reply_to=f"{stack.prefix}.replies")
        call = asyncio.create_task(client.call(
            f"{stack.prefix}.payments.commands", str(saga).encode(), encode(command),
            [(k, v) for k, v in envelope_headers(command)]))
        await asyncio.sleep(1.5)  # the command is in flight, waiting for the lock
        assert not call.done()
        took = await stop(proc, signal.SIGTERM, log)
        assert await asyncio.wait_for(call, 5) is None
    finally:
        await client.close()
        await locker.close()
    print(f"participant stopped {took:.2f}s after SIGTERM with a lane command in flight")


async def test_stop_while_the_api_drains(stack: ChaosStack, tmp_path: Path) -> None:
    argv, env = argv_of("api", stack)
    port = argv[argv.index("--port") + 1]
    log = tmp_path / "api.log"
    proc = spawn(argv, env, log)
    await wait_for_log(log, SERVING["api"], proc)
    headers = {"Authorization": "Bearer stop-test-token"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers,
                                 timeout=30) as client:
        started = await client.post("/sagas", json={"type": "order", "input": {
            "order_id": "o", "customer_id": "c", "amount_cents": 1, "sku": "s",
            "quantity": 1, "address": "a"}})
        assert started.status_code in (200, 201, 202), started.text
        saga_id = started.json()["saga_id"]
        poll = asyncio.create_task(client.get(f"/sagas/{saga_id}/result",
                                              params={"wait": "20s"}))
        await asyncio.sleep(1.0)  # a long poll is open: nothing will end it soon
        assert not poll.done()
        took = await stop(proc, signal.SIGTERM, log, draining=True)
        poll.cancel()
    print(f"api stopped {took:.2f}s after SIGTERM with a long poll open")


async def test_stop_the_demo(tmp_path: Path, pg_url: str, kafka_bootstrap: str) -> None:
    log = tmp_path / "demo.log"
    prefix = f"stop{uuid.uuid4().hex[:6]}_"
    env = {"SAGAFLOW_DEVSTACK_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    argv = ["-m", "examples.demo", "--postgres", pg_url, "--kafka", kafka_bootstrap,
            "--port", str(free_port()), "--database-prefix", prefix]
    try:
        proc = spawn(argv, env, log)
        await wait_for_log(log, "started shipping", proc)  # starting its processes
        await stop(proc, signal.SIGTERM, log)
        proc = spawn(argv, env, log)
        await wait_for_log(log, "Ctrl-C stops everything", proc, within=150)  # serving
        await stop(proc, signal.SIGINT, log)
    finally:
        for name in database_names(prefix).values():
            await drop_database(pg_url, name)
    for child in (tmp_path / "demo").glob("*.log"):
        text = read(child)
        assert WATCHDOG not in text and ABANDONED not in text, tail(child)
