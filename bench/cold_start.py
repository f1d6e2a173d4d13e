"""Cold starts of the function entry points: a fresh interpreter per measurement.

``python -m bench.cold_start [--runs 5]`` prepares a migrated database (and topics), then for
each entry point launches ``python -c`` with one prepared event and reports, from the launch:
**import** (interpreter up and the entry point's modules imported) and **first applied** (the
event's effect committed: the reply applied, the command answered and its reply acknowledged
by Kafka, the outbox row acknowledged and deleted). Each child also reports which heavy
modules (the API framework, exporters) it imported: there should be none. Prints a table and
writes ``bench/results/cold-start-<timestamp>.json``. Also ``python -X importtime`` is how the
import paths were trimmed; ``--importtime`` prints the ten slowest imports per entry point.

The project's bytecode is compiled first (``compileall``), as a deployment package or image
ships it: a function's file system is read-only, or ``PYTHONDONTWRITEBYTECODE`` is set, so a
package without ``.pyc`` files compiles every module from source at every cold start (~60 ms
here). ``--no-compile`` measures whatever bytecode is already there.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import compileall
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import asyncpg

from bench.stack import REPO, RESULTS
from coordinator.migrations import migrate
from coordinator.sagas.loading import build_registry
from coordinator.store import SagaStore
from examples.services import payments
from outbox_relay import OutboxMessage, enqueue, install
from participant_sdk.protocol import (
    Outcome,
    command_topic,
    decode_command,
    encode,
    make_reply,
    reply_topic,
)

SAGA = "examples.order_saga:OrderSaga"
#: The packages a function deployment ships, compiled to bytecode before the measurement.
PACKAGES = ("coordinator", "participant_sdk", "outbox_relay", "examples")
HEAVY = ("fastapi", "starlette", "uvicorn", "jinja2", "opentelemetry.exporter",
         "opentelemetry.instrumentation")

_PRELUDE = """
import json, sys, time
cfg = json.loads(sys.argv[1])
"""
_EPILOGUE = """
heavy = sorted({m for m in sys.modules if m.startswith(tuple(cfg['heavy']))})
kafka_client = any(m.startswith('aiokafka') for m in sys.modules)
print(json.dumps({"import": t_import, "done": time.time(), "out": out, "heavy": heavy,
                  "kafka_client": kafka_client}))
"""

#: The coordinator's reply entry points build their settings with ``FunctionSettings``; the
#: row with ``CoordinatorSettings`` shows what pydantic-settings adds to a cold start.
CHILDREN: dict[str, str] = {
    "coordinator reply batch (Lambda Kafka event)": """
from coordinator.runtime.functions import CoordinatorFunctions, FunctionSettings
from coordinator.sagas.loading import build_registry
t_import = time.time()
fns = CoordinatorFunctions(
    FunctionSettings.from_env(dsn=cfg['dsn'], topic_prefix=cfg['prefix'], pool_max_size=2),
    build_registry([cfg['saga']], topic_prefix=cfg['prefix']))
out = fns.lambda_replies()(cfg['event'], None)
""",
    "coordinator reply batch, CoordinatorSettings": """
from coordinator.runtime.functions import CoordinatorFunctions
from coordinator.config.settings import CoordinatorSettings
from coordinator.sagas.loading import build_registry
t_import = time.time()
fns = CoordinatorFunctions(
    CoordinatorSettings(dsn=cfg['dsn'], topic_prefix=cfg['prefix'], pool_max_size=2),
    build_registry([cfg['saga']], topic_prefix=cfg['prefix']))
out = fns.lambda_replies()(cfg['event'], None)
""",
    "coordinator reply (Knative CloudEvent, ASGI)": """
import asyncio
from coordinator.runtime.functions import CoordinatorFunctions, FunctionSettings
from coordinator.sagas.loading import build_registry
from participant_sdk.functions import cloudevents_app
t_import = time.time()
fns = CoordinatorFunctions(
    FunctionSettings.from_env(dsn=cfg['dsn'], topic_prefix=cfg['prefix'], pool_max_size=2),
    build_registry([cfg['saga']], topic_prefix=cfg['prefix']))
app = cloudevents_app(fns.replies)
sent = []
async def call():
    body = cfg['body'].encode('latin-1')
    async def receive(): return {'type': 'http.request', 'body': body}
    async def send(m): sent.append(m)
    scope = {'type': 'http', 'method': 'POST', 'headers': [
        (k.encode(), v.encode()) for k, v in cfg['headers'].items()]}
    await app(scope, receive, send)
asyncio.run(call())
out = sent[0]['status']
""",
    "participant command batch (Lambda Kafka event)": """
from participant_sdk.functions import command_batch, lambda_handler
from participant_sdk import CommandBatchHandler, ParticipantSettings
from examples.services.payments import Payments
t_import = time.time()
handler = CommandBatchHandler(Payments(), ParticipantSettings(
    dsn=cfg['dsn'], kafka_bootstrap=cfg['kafka'], topic_prefix=cfg['prefix'], pool_size=2,
    install_schema=False))
out = lambda_handler(lambda: command_batch(handler))(cfg['event'], None)
""",
    "relay tick (scheduled)": """
import asyncio
from outbox_relay.settings import RelaySettings
from outbox_relay.tick import RelayTick
t_import = time.time()
async def once():
    tick = RelayTick(RelaySettings(postgres_dsn=cfg['relay_dsn'], kafka_bootstrap=cfg['kafka'],
                                   install_schema=False))
    try:
        return (await tick()).published
    finally:
        await tick.close()
out = asyncio.run(once())
""",
}


def _lambda_event(topic: str, key: bytes, value: bytes, offset: int) -> dict[str, Any]:
    return {"eventSource": "SelfManagedKafka", "bootstrapServers": "x:9092", "records": {
        f"{topic}-0": [{"topic": topic, "partition": 0, "offset": offset,
                        "timestamp": 0, "timestampType": "CREATE_TIME",
                        "key": base64.b64encode(key).decode(),
                        "value": base64.b64encode(value).decode(), "headers": []}]}}


class Prepared:
    """A migrated coordinator database with sagas whose first command waits for an answer."""

    def __init__(self, admin: str, kafka: str) -> None:
        self.admin, self.kafka = admin, kafka
        self.prefix = f"cold{uuid.uuid4().hex[:8]}"
        self.db = f"cold_{uuid.uuid4().hex[:12]}"
        self.relay_db = self.db + "_relay"
        base = admin.rsplit("/", 1)[0]
        self.dsn, self.relay_dsn = f"{base}/{self.db}", f"{base}/{self.relay_db}"
        self.offset = 0

    async def setup(self) -> None:
        conn = await asyncpg.connect(self.admin)
        await conn.execute(f'CREATE DATABASE "{self.db}"')
        await conn.execute(f'CREATE DATABASE "{self.relay_db}"')
        await conn.close()
        conn = await asyncpg.connect(self.dsn)
        await migrate(conn)
        await payments.install_tables(conn)
        from participant_sdk.barrier import install_barrier
        from participant_sdk.dead_letters import install_dead_letters
        await install_barrier(conn)
        await install_dead_letters(conn)
        await conn.close()
        conn = await asyncpg.connect(self.relay_dsn)
        await install(conn)
        await conn.close()
        self.store = await SagaStore.open(
            self.dsn, build_registry([SAGA], topic_prefix=self.prefix), min_size=1, max_size=2)

    async def teardown(self) -> None:
        await self.store.close()
        conn = await asyncpg.connect(self.admin)
        for name in (self.db, self.relay_db):
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()

    async def first_command(self) -> Any:
        saga = (await self.store.start_saga("order", {
            "order_id": uuid.uuid4().hex, "customer_id": "c", "amount_cents": 100,
            "sku": "s", "quantity": 1, "address": "a"})).record.saga_id
        async with self.store.pool.acquire() as conn:
            raw = await conn.fetchval(
                "DELETE FROM sagaflow_outbox WHERE key = $1 RETURNING payload", str(saga))
        return decode_command(bytes(raw))

    async def config(self, entry: str) -> dict[str, Any]:
        self.offset += 1
        cfg: dict[str, Any] = {"dsn": self.dsn, "relay_dsn": self.relay_dsn,
                               "kafka": self.kafka, "prefix": self.prefix, "saga": SAGA,
                               "heavy": list(HEAVY)}
        command = await self.first_command()
        reply = encode(make_reply(command, Outcome.OK, result={"cold": True}))
        key = str(command.saga_id).encode()
        if entry.startswith("coordinator reply batch"):  # with either settings
            cfg["event"] = _lambda_event(reply_topic(self.prefix), key, reply, self.offset)
            cfg["check"] = str(command.saga_id)
        elif entry.startswith("coordinator reply (Knative"):
            cfg["headers"] = {
                "ce-specversion": "1.0", "ce-id": f"partition:0/offset:{self.offset}",
                "ce-source": f"/apis/v1/namespaces/d/kafkasources/r#{reply_topic(self.prefix)}",
                "ce-type": "dev.knative.kafka.event", "ce-subject": f"partition:0#{self.offset}",
                "ce-key": key.decode(), "content-type": "application/json"}
            cfg["body"] = reply.decode("latin-1")
            cfg["check"] = str(command.saga_id)
        elif entry.startswith("participant"):
            cfg["event"] = _lambda_event(command_topic(command.participant, self.prefix), key,
                                         encode(command), self.offset)
        else:
            conn = await asyncpg.connect(self.relay_dsn)
            async with conn.transaction():
                await enqueue(conn, [OutboxMessage(topic=f"{self.prefix}.cold", key="k",
                                                   payload=b"x", message_id=uuid.uuid4())])
            await conn.close()
        return cfg

    async def applied(self, saga_id: str) -> bool:
        async with self.store.pool.acquire() as conn:
            return bool(await conn.fetchval(
                "SELECT count(*) FROM saga_history WHERE saga_id = $1 AND actor LIKE "
                "'participant:%'", uuid.UUID(saga_id)))


def _run_child(entry: str, cfg: dict[str, Any], *, importtime: bool = False
               ) -> dict[str, Any]:
    code = _PRELUDE + CHILDREN[entry] + _EPILOGUE
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    flags = ["-X", "importtime"] if importtime else []
    launched = time.time()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, *flags, "-c", code, json.dumps(cfg)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{entry}: child failed:\n{done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    report["import_ms"] = (report["import"] - launched) * 1000
    report["first_ms"] = (report["done"] - launched) * 1000
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    report["cpu_ms"] = cpu * 1000
    if importtime:
        report["slowest_imports"] = slowest_imports(done.stderr)
    return report


def slowest_imports(stderr: str, count: int = 10) -> list[tuple[str, float, float]]:
    """The ``count`` imports with the largest own time in ``-X importtime`` output, as
    (module, own ms, cumulative ms)."""
    rows = []
    for line in stderr.splitlines():
        head, _, rest = line.partition("import time:")
        if head or not rest:
            continue
        own, cumulative, name = (part.strip() for part in rest.split("|"))
        if own.isdigit():
            rows.append((name, int(own) / 1000, int(cumulative) / 1000))
    return sorted(rows, key=lambda row: -row[1])[:count]


async def _transactions(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"))
    finally:
        await conn.close()


async def idle_tick_cost(prepared: Prepared, ticks: int = 20) -> dict[str, float]:
    """Database transactions of one tick (schedules, timers, relay) when nothing is due. A
    warm instance's backends flush their statistics when they exit, so the pool is closed
    before the second reading."""
    from coordinator.config.settings import CoordinatorSettings
    from coordinator.runtime.functions import CoordinatorFunctions
    from outbox_relay import RelaySettings

    def build() -> CoordinatorFunctions:
        return CoordinatorFunctions(
            CoordinatorSettings(dsn=prepared.dsn, topic_prefix=prepared.prefix,
                                pool_max_size=2),
            prepared.store.registry,
            relay=RelaySettings(postgres_dsn=prepared.dsn, kafka_bootstrap=prepared.kafka))

    warm = build()
    await warm.tick()  # publishes what the other measurements left in the outbox
    await warm.close()
    fns = build()
    await fns.tick()
    await fns.close()
    await asyncio.sleep(1.5)
    fns = build()
    before = await _transactions(prepared.dsn)
    started = time.perf_counter()
    for _ in range(ticks):
        await fns.tick()
    elapsed = time.perf_counter() - started
    await fns.close()
    await asyncio.sleep(1.5)
    after = await _transactions(prepared.dsn)
    # The two readings are one transaction each; the first is counted in ``after``.
    return {"transactions_per_idle_tick": (after - before - 1) / ticks,
            "idle_tick_ms": elapsed * 1000 / ticks}


def compile_bytecode() -> None:
    """Write the ``.pyc`` files a deployment ships (the children only read them)."""
    for package in PACKAGES:
        if not compileall.compile_dir(REPO / package, quiet=1):
            raise RuntimeError(f"compileall failed for {package}")


def _bare_ms() -> float:
    launched = time.time()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.time() - launched) * 1000


async def measure(admin: str, kafka: str, runs: int, *, importtime: bool = False
                  ) -> dict[str, Any]:
    prepared = Prepared(admin, kafka)
    await prepared.setup()
    results: dict[str, Any] = {"bare_interpreter_ms": statistics.median(
        _bare_ms() for _ in range(runs))}
    try:
        for entry in CHILDREN:
            rows = []
            for _ in range(runs):
                cfg = await prepared.config(entry)
                report = await asyncio.to_thread(_run_child, entry, cfg)
                if "check" in cfg and not await prepared.applied(cfg["check"]):
                    raise RuntimeError(f"{entry}: the reply was not applied: {report['out']}")
                rows.append(report)
            results[entry] = {
                "import_ms_median": statistics.median(r["import_ms"] for r in rows),
                "import_ms_min": min(r["import_ms"] for r in rows),
                "first_applied_ms_median": statistics.median(r["first_ms"] for r in rows),
                "first_applied_ms_min": min(r["first_ms"] for r in rows),
                "heavy_modules": sorted({m for r in rows for m in r["heavy"]}),
                "imports_kafka_client": any(r["kafka_client"] for r in rows),
                "cpu_ms_median": statistics.median(r["cpu_ms"] for r in rows),
                "outputs": [r["out"] for r in rows][:2],
            }
            if importtime:  # one more run: the import profile's own cost stays out of the figures
                cfg = await prepared.config(entry)
                report = await asyncio.to_thread(_run_child, entry, cfg, importtime=True)
                results[entry]["slowest_imports"] = report["slowest_imports"]
        results["idle tick"] = await idle_tick_cost(prepared)
    finally:
        await prepared.teardown()
    return results


def render(results: dict[str, Any]) -> str:
    lines = [f"bare interpreter (python -c pass): {results['bare_interpreter_ms']:.0f} ms; "
             f"project bytecode: {results.get('bytecode', 'compiled ahead')}", "",
             f"{'entry point':<48} {'import ms':>16} {'first applied ms':>18} {'CPU ms':>7}"
             "  heavy imports",
             f"{'':<48} {'median (min)':>16} {'median (min)':>18} {'median':>7}"]
    for entry, r in results.items():
        if not isinstance(r, dict) or "import_ms_median" not in r:
            continue
        lines.append(
            f"{entry:<48} {r['import_ms_median']:>8.0f} ({r['import_ms_min']:>4.0f}) "
            f"{r['first_applied_ms_median']:>10.0f} ({r['first_applied_ms_min']:>4.0f}) "
            f"{r['cpu_ms_median']:>7.0f}  {', '.join(r['heavy_modules']) or 'none'}"
            f"{'' if r['imports_kafka_client'] else ' (no Kafka client)'}")
    for entry, r in results.items():
        if isinstance(r, dict) and r.get("slowest_imports"):
            lines += ["", f"{entry}: slowest imports (own ms, cumulative ms)"]
            lines += [f"  {own:7.1f} {cumulative:8.1f}  {name}"
                      for name, own, cumulative in r["slowest_imports"]]
    idle = results.get("idle tick")
    if idle:
        lines += ["", f"idle tick (nothing due, warm instance): "
                      f"{idle['transactions_per_idle_tick']:.1f} transactions, "
                      f"{idle['idle_tick_ms']:.1f} ms"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cold_start",
                                description=__doc__.splitlines()[0])
    p.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"))
    p.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--no-compile", action="store_true",
                   help="do not compile the project's bytecode first")
    p.add_argument("--importtime", action="store_true",
                   help="also print the ten slowest imports of each entry point")
    args = p.parse_args(argv)
    if not args.no_compile:
        compile_bytecode()
    results = asyncio.run(measure(args.postgres, args.kafka, args.runs,
                                  importtime=args.importtime))
    results["bytecode"] = "as found" if args.no_compile else "compiled ahead"
    results["machine"] = {"load_average": os.getloadavg(), "cpus": os.cpu_count()}
    print(render(results))
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    out = RESULTS / f"cold-start-{stamp}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwritten {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
