"""The demo saga stack: coordinator worker, relay and five participants as separate processes.

``python -m examples.demo`` (run by ``make demo`` once the local services are up) creates
fresh databases, starts every process and the operator API with its web UI, runs an order that
completes and one that is refused by inventory and rolls back, then a checkout (the tree-shaped
saga: a for-each over order lines and a race between two carriers) that completes, the slower
carrier's booking cancelled, and one with a line out of stock that rolls back, then the order
again with stock and shipment in a child saga (confirmed with its parent, or rolled back with
it); prints what happened, audits the participants' ledgers, checks that every saga's history
replays to its snapshot, then prints the UI's address and a sign-in token and keeps everything
running until Ctrl-C. ``--once`` stops the processes after the report instead (CI and the
end-to-end test use it). ``--definitions yaml`` loads the order and checkout sagas from their
YAML files (``examples/*.yaml``) instead of their classes, with the same outcomes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import asyncpg
from opentelemetry import trace

from coordinator.config.settings import CoordinatorSettings
from coordinator.engine import ReplyReceived, Status
from coordinator.migrations import migrate
from coordinator.runtime.hints.relay import start_relay_waker
from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore
from coordinator.store.queries import list_children
from examples.stack import CARRIERS, SERVICES, fresh_database, processes, saga_specs, stack_commands
from participant_sdk.stopping import StopSignals
from participant_sdk.telemetry import configure as configure_telemetry

#: How long the demo lets its processes stop by themselves before killing them.
CHILDREN_GRACE = 1.5
HOME = Path(os.environ.get("SAGAFLOW_DEVSTACK_HOME", Path(__file__).parents[1] / ".local"))

ORDERS = {
    "completes": {"order_id": "A-100", "customer_id": "alice", "amount_cents": 2500,
                  "sku": "BOOK-1", "quantity": 2, "address": "1 Main St"},
    "compensates": {"order_id": "B-200", "customer_id": "alice", "amount_cents": 4000,
                    "sku": "OOS-LAMP", "quantity": 1, "address": "1 Main St"},
}
CHECKOUTS = {
    "completes": {"order_id": "C-300", "customer_id": "carol", "amount_cents": 5400,
                  "address": "2 High St", "lines": [{"sku": "BOOK-1", "quantity": 1},
                                                    {"sku": "MUG-2", "quantity": 2},
                                                    {"sku": "PEN-3", "quantity": 3}]},
    "compensates": {"order_id": "D-400", "customer_id": "carol", "amount_cents": 1800,
                    "address": "2 High St", "lines": [{"sku": "MUG-2", "quantity": 1},
                                                      {"sku": "OOS-LAMP", "quantity": 1},
                                                      {"sku": "PEN-3", "quantity": 1}]},
}
NESTED = {
    "completes": {**ORDERS["completes"], "order_id": "E-500"},
    "compensates": {**ORDERS["compensates"], "order_id": "F-600"},
}
#: What the demo starts: (saga type, what to call it in the report, inputs by outcome).
RUNS = (("order", "place order", ORDERS), ("checkout", "check out", CHECKOUTS),
        ("order_nested", "place an order with a child saga", NESTED))


async def _wait_terminal(store: SagaStore, saga_id: uuid.UUID) -> Any:
    async with asyncio.timeout(60):
        while True:
            record = await store.get_saga(saga_id)
            if record is not None and Status(record.status).is_terminal:
                return record
            await asyncio.sleep(0.1)


def _describe(entry: Any) -> str:
    event = entry.event
    if isinstance(event, ReplyReceived):
        reply = event.reply
        text = f"{reply.participant:<9} {reply.step}.{reply.phase.value} -> {reply.outcome.value}"
        if reply.error is not None:
            text += f" ({reply.error.message})"
    else:
        text = event.type
    return text + (f"   [ignored: {entry.ignored}]" if entry.ignored else "")


async def _report(store: SagaStore, saga_type: str, label: str, saga_id: uuid.UUID) -> None:
    record = await _wait_terminal(store, saga_id)
    print(f"\n== {saga_type} that {label}: saga {saga_id} -> {record.status}")
    for entry in await store.get_history(saga_id):
        print(f"   #{entry.seq:<2} {_describe(entry)}")
    race = record.state.steps.get("ship") if saga_type == "checkout" else None
    if race is not None and race.winners:
        print(f"   the race \"ship\" was won by {', '.join(race.winners)}; the other is undone")
    verdict = await store.verify(saga_id)
    print(f"   replay of {verdict.replayed_events} events equals snapshot: {verdict.ok}")
    async with store.pool.acquire() as conn:
        children = await list_children(conn, saga_id)
    for child_id, child_type, status, node, _ in children:
        verdict = await store.verify(child_id)
        print(f"   child saga {child_type} {child_id} (node {node}) -> {status}; replay of "
              f"{verdict.replayed_events} events equals its snapshot: {verdict.ok}")


async def _ledgers(dsns: dict[str, str]) -> None:
    print("\n== participants' ledgers")
    queries = {
        "payments": "SELECT kind, customer AS who, amount FROM payments_ledger ORDER BY id",
        "inventory": (
            "SELECT kind, sku AS who, quantity AS amount FROM inventory_ledger ORDER BY id"
        ),
        "shipping": "SELECT kind, step AS who, 1 AS amount FROM shipping_ledger ORDER BY id",
        **dict.fromkeys(CARRIERS, (
            "SELECT l.kind, b.order_id AS who, b.parcels AS amount FROM carrier_ledger l"
            " JOIN carrier_bookings b USING (booking_id, carrier) ORDER BY l.id")),
    }
    for name, query in queries.items():
        conn = await asyncpg.connect(dsns[name])
        try:
            rows = await conn.fetch(query)
        finally:
            await conn.close()
        entries = ", ".join(f"{r['kind']} {r['who']} {r['amount']}" for r in rows) or "nothing"
        print(f"   {name:<10} {entries}")


def _free_port(preferred: int) -> int:
    """``preferred`` when it is free, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            found: int = s.getsockname()[1]
            return found
    raise OSError("no free port")


def _api_command(coordinator_dsn: str, service_dsns: dict[str, str], prefix: str,
                 port: int, tokens: str, telemetry: dict[str, str],
                 sagas: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """The operator API with the web UI, reading the participants' dead letters too."""
    env = {
        **telemetry,
        "SAGAFLOW_DSN": coordinator_dsn, "SAGAFLOW_SAGAS": ",".join(sagas),
        "SAGAFLOW_TOPIC_PREFIX": prefix,
        "SAGAFLOW_API_HOST": "127.0.0.1", "SAGAFLOW_API_PORT": str(port),
        "SAGAFLOW_API_TOKENS": tokens, "SAGAFLOW_UI_SESSION_SECRET": secrets.token_urlsafe(32),
        "SAGAFLOW_UI_PARTICIPANT_DSNS": ",".join(f"{n}={d}" for n, d in service_dsns.items()),
    }
    query = os.environ.get("SAGAFLOW_JAEGER_QUERY") or os.environ.get("SAGAFLOW_TEST_JAEGER_QUERY")
    if query:
        env["SAGAFLOW_JAEGER_QUERY"] = query
    return [sys.executable, "-m", "coordinator", "api"], env


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/services", timeout=3) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def _announce_trace_view(query: str) -> None:
    """Say where the traces are, or that Jaeger is still being built and when it is ready.

    Until then devstack's span keeper holds Jaeger's OTLP port and keeps every span sent.
    """
    view = f"{query}/search?service=sagaflow-demo"
    if await asyncio.to_thread(_answers, query):
        print(f"   traces: {view}")
        return
    print("   traces: Jaeger is still being built in the background (the first run only); "
          "the spans sent meanwhile are kept, and this says when the trace view is ready")
    while True:
        await asyncio.sleep(2)
        if await asyncio.to_thread(_answers, query):
            break
    print(f"\n== the trace view is ready: {view} (every span sent meanwhile included)",
          flush=True)


def database_names(prefix: str = "") -> dict[str, str]:
    """The demo's databases by role (``coordinator``, then each participant)."""
    return {"coordinator": f"{prefix}sagaflow_demo",
            **{name: f"{prefix}demo_{name}" for name in (*SERVICES, *CARRIERS)}}


async def run(postgres: str, kafka: str, *, once: bool = True, port: int = 8080,
              database_prefix: str = "", definitions: str = "classes") -> None:
    sagas = saga_specs(definitions)
    prefix = f"demo{uuid.uuid4().hex[:6]}"
    names = database_names(database_prefix)
    coordinator_dsn = await fresh_database(postgres, names.pop("coordinator"))
    dsns = {role: await fresh_database(postgres, name) for role, name in names.items()}
    conn = await asyncpg.connect(coordinator_dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()

    # OTEL_EXPORTER_OTLP_ENDPOINT, as the README says, traces every run; devstack's Jaeger
    # (make demo) traces the serving demo only.
    otlp = (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or (None if once else os.environ.get("SAGAFLOW_TEST_JAEGER_OTLP")))
    telemetry = ({"OTEL_EXPORTER_OTLP_ENDPOINT": otlp, "OTEL_BSP_SCHEDULE_DELAY": "200"}
                 if otlp else {})
    commands = stack_commands(coordinator_dsn=coordinator_dsn, service_dsns=dsns, kafka=kafka,
                              topic_prefix=prefix, env=telemetry, sagas=sagas)
    operator, viewer = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    if not once:
        port = _free_port(port)
        commands["api"] = _api_command(coordinator_dsn, dsns, prefix, port,
                                       f"demo:operator:{operator},guest:viewer:{viewer}",
                                       telemetry, sagas)
    provider = None
    if telemetry:  # the demo's own spans (the API call that starts each saga) go to Jaeger too
        os.environ.update(telemetry)
        provider = configure_telemetry("sagaflow-demo", instrument=False)
    tracer = trace.get_tracer("examples.demo")
    print(f"== starting the stack (topics {prefix}.*, the order and checkout sagas as "
          f"{'YAML definitions' if definitions == 'yaml' else 'Python classes'})")
    registry = build_registry(sagas, topic_prefix=prefix)
    with processes(commands, HOME / "demo", grace=CHILDREN_GRACE):
        async with await SagaStore.open(coordinator_dsn, registry, max_size=2) as store:
            # Hint the relay after each start, as the API does (an idle relay waits for it).
            waker = await start_relay_waker(store, CoordinatorSettings(dsn=coordinator_dsn))
            started = []
            try:
                for saga_type, verb, inputs in RUNS:
                    for label, saga_input in inputs.items():  # one trace per saga, rooted here
                        with tracer.start_as_current_span(f"{verb} ({label})"):
                            record = (await store.start_saga(saga_type, saga_input,
                                                             actor="demo")).record
                        started.append((saga_type, label, record.saga_id))
            finally:
                if waker is not None:
                    await waker.stop()
            for saga_type, label, saga_id in started:
                await _report(store, saga_type, label, saga_id)
        await _ledgers(dsns)
        if not once:
            print(f"\n== the operator console is up: http://127.0.0.1:{port}/ui/")
            print(f"   sign in with token {operator} (operator) or {viewer} (viewer)")
            print(f"   API docs: http://127.0.0.1:{port}/docs  ·  Ctrl-C stops everything")
            query = (os.environ.get("SAGAFLOW_JAEGER_QUERY")
                     or os.environ.get("SAGAFLOW_TEST_JAEGER_QUERY"))
            announcer = (asyncio.create_task(_announce_trace_view(query))
                         if telemetry and query else None)
            try:
                await asyncio.Event().wait()  # until a signal cancels the demo (see main)
            finally:
                if announcer is not None:
                    announcer.cancel()
    if provider is not None:
        provider.shutdown()
    print("\nDone. Logs are in", HOME / "demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"))
    parser.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    parser.add_argument("--once", action="store_true",
                        help="stop after the report instead of serving the UI until Ctrl-C")
    parser.add_argument("--port", type=int, default=8080,
                        help="the UI's port (another free one if it is taken)")
    parser.add_argument("--database-prefix", default="",
                        help="prefix of the demo's database names (they are dropped and made "
                        "afresh at each run)")
    parser.add_argument("--definitions", choices=("classes", "yaml"), default="classes",
                        help="load the order and checkout sagas from their Python classes or "
                        "from examples/*.yaml (the same sagas declared as data)")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_stoppable(run(args.postgres, args.kafka, once=args.once, port=args.port,
                                   database_prefix=args.database_prefix,
                                   definitions=args.definitions)))
    except (asyncio.CancelledError, KeyboardInterrupt):
        print("\nStopped. Logs are in", HOME / "demo")
    return 0


async def _stoppable(work: Coroutine[Any, Any, None]) -> None:
    """SIGTERM or Ctrl-C cancels the demo at once, whatever it is doing; leaving
    ``processes`` then stops every child (each stops within two seconds by itself, and is
    killed after ``CHILDREN_GRACE``), so the demo ends within two seconds too."""
    task = asyncio.current_task()
    assert task is not None
    with StopSignals(task.cancel, grace=0.1, deadline=1.95):
        await work


if __name__ == "__main__":
    sys.exit(main())
