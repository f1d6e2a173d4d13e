"""One saga, one trace: the stack runs as separate processes exporting OTLP to a real Jaeger.

The order is refused by shipping (address ``nowhere``) after payments and inventory reserved,
so the trace holds every process: the test's client span, the relay, the three services and the
coordinator applying each reply, then the cancels. The test reads the trace back from Jaeger's
query API and checks the parent chain and the error on the rejected step.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from coordinator.engine import Status
from coordinator.migrations import migrate
from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore
from coordinator.ui.trace import fetch_trace
from examples.stack import SAGA, SERVICES, drop_database, fresh_database, processes, stack_commands
from tests.chaos.support.services import free_port

pytestmark = pytest.mark.e2e

CLIENT = "sagaflow-e2e-client"
ORDER = {"order_id": "C-300", "customer_id": "bob", "amount_cents": 1500, "sku": "BOOK-2",
         "quantity": 1, "address": "nowhere"}
LOGS = Path(os.environ.get("SAGAFLOW_DEVSTACK_HOME", Path(__file__).parents[2] / ".local"))


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def _parent(span: dict[str, Any]) -> str | None:
    for ref in span.get("references", []):
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


async def _fetch(query: str, trace_id: str, *, ready: Any, wait: float = 45) -> dict[str, Any]:
    """The trace once ``ready(trace)`` holds (spans arrive in batches from five processes)."""
    last: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=5) as client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while loop.time() < deadline:
            resp = await client.get(f"{query}/api/traces/{trace_id}")
            if resp.status_code == 200 and resp.json().get("data"):
                last = resp.json()["data"][0]
                if ready(last):
                    return last
            await asyncio.sleep(0.5)
    return last


def _index(data: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    spans = {s["spanID"]: s for s in data.get("spans", [])}
    service = {sid: data["processes"][s["processID"]]["serviceName"] for sid, s in spans.items()}
    return spans, service


def _complete(prefix: str) -> Any:
    def ready(data: dict[str, Any]) -> bool:
        spans, service = _index(data)
        applied = [s for sid, s in spans.items() if service[sid] == "sagaflow-coordinator"
                   and s["operationName"] == f"process {prefix}.replies"]
        cancels = {(service[sid], _tags(s).get("saga.phase")) for sid, s in spans.items()
                   if s["operationName"].startswith("process ")}
        orphans = [s for s in spans.values() if _parent(s) and _parent(s) not in spans]
        # 3 forward replies + 2 cancel replies applied, both cancels handled, nothing missing.
        return (len(applied) >= 5 and ("payments", "cancel") in cancels
                and ("inventory", "cancel") in cancels and not orphans)
    return ready


def _lane_env(lane: str) -> dict[str, dict[str, str]]:
    """With the direct lane: each service serves one, the coordinator hands commands to it."""
    if lane == "kafka":
        return {}
    addresses = {s: f"127.0.0.1:{free_port()}" for s in SERVICES}
    env = {s: {"SAGAFLOW_PARTICIPANT_DIRECT_LISTEN": a} for s, a in addresses.items()}
    env["coordinator"] = {"SAGAFLOW_DIRECT_ENDPOINTS": ",".join(
        f"{s}={a}" for s, a in addresses.items())}
    return env


async def _lanes_open(logs: Path) -> None:
    async with asyncio.timeout(30):
        for service in SERVICES:
            while "direct lane on" not in (logs / f"{service}.log").read_text(  # noqa: ASYNC110
                    errors="replace"):
                await asyncio.sleep(0.1)


@pytest.mark.parametrize("lane", ["kafka", "direct"])
async def test_a_compensating_saga_is_one_trace_across_every_process(
    pg_url: str, kafka_bootstrap: str, jaeger_otlp: str, jaeger_query: str, lane: str
) -> None:
    prefix = f"jt{uuid.uuid4().hex[:8]}"
    names = {"coordinator": f"{prefix}_coord", **{s: f"{prefix}_{s}" for s in SERVICES}}
    dsns = {name: await fresh_database(pg_url, db) for name, db in names.items()}
    conn = await asyncpg.connect(dsns["coordinator"])
    try:
        await migrate(conn)
    finally:
        await conn.close()

    telemetry = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger_otlp, "OTEL_BSP_SCHEDULE_DELAY": "200",
                 "OTEL_SERVICE_NAME": ""}
    commands = stack_commands(
        coordinator_dsn=dsns["coordinator"], service_dsns={s: dsns[s] for s in SERVICES},
        kafka=kafka_bootstrap, topic_prefix=prefix, env=telemetry,
        per_process_env=_lane_env(lane),
    )
    provider = TracerProvider(resource=Resource.create({"service.name": CLIENT}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=jaeger_otlp.rstrip("/") + "/v1/traces")))
    tracer = provider.get_tracer("tests.e2e")
    registry = build_registry([SAGA], topic_prefix=prefix)
    try:
        with processes(commands, LOGS / "e2e-jaeger", quiet=True):
            if lane == "direct":  # the saga's second command must find the lanes open
                await _lanes_open(LOGS / "e2e-jaeger")
            async with await SagaStore.open(dsns["coordinator"], registry, max_size=2) as store:
                with tracer.start_as_current_span("place order") as root:
                    started = await store.start_saga("order", ORDER, actor="e2e")
                trace_id = format(root.get_span_context().trace_id, "032x")
                saga_id = started.record.saga_id
                assert started.record.trace_context["traceparent"].split("-")[1] == trace_id
                async with asyncio.timeout(90):
                    while True:
                        record = await store.get_saga(saga_id)
                        assert record is not None
                        if Status(record.status).is_terminal:
                            break
                        await asyncio.sleep(0.2)
                assert record.status == "compensated"
        # The processes stopped with SIGTERM and flushed their span batches.
        data = await _fetch(jaeger_query, trace_id, ready=_complete(prefix))
    finally:
        provider.shutdown()
        for db in names.values():
            await drop_database(pg_url, db)
    out = os.environ.get("SAGAFLOW_E2E_TRACE_OUT")
    if out:
        Path(out).write_text(json.dumps(data, indent=1))  # noqa: ASYNC240 - a debug dump

    spans, service = _index(data)
    assert spans, f"Jaeger has no trace {trace_id}"
    assert {CLIENT, "sagaflow-coordinator", "sagaflow-relay", *SERVICES} <= set(service.values())
    assert _complete(prefix)(data), "trace incomplete or has spans whose parent is missing"
    roots = [s for s in spans.values() if _parent(s) is None]
    assert [r["operationName"] for r in roots] == ["place order"]

    def chain(span_id: str) -> list[str]:
        path = []
        current: str | None = span_id
        while current is not None:
            path.append(service[current])
            current = _parent(spans[current])
        return path[::-1]

    rejected = [sid for sid, s in spans.items() if service[sid] == "shipping"
                and s["operationName"] == f"process {prefix}.shipping.commands"
                and _tags(s).get("saga.phase") == "action"]
    assert len(rejected) == 1
    tags = _tags(spans[rejected[0]])
    assert tags.get("error") is True and tags["saga.outcome"] == "rejected"
    assert tags["saga.id"] == str(saga_id) and tags["saga.step"] == "create_shipment"
    assert tags["saga.phase"] == "action" and tags["saga.attempt"] == 1
    # The first command goes over Kafka (the relay sends it); with the lane, every later one
    # over the lane.
    assert tags["messaging.system"] == ("kafka" if lane == "kafka" else "sagaflow.direct")
    first = [s for sid, s in spans.items() if service[sid] == "payments"
             and _tags(s).get("saga.phase") == "try"]
    assert [_tags(s)["messaging.system"] for s in first] == ["kafka"]
    assert any(log_["fields"] and any(f["key"] == "event" and f["value"] == "exception"
                                      for f in log_["fields"])
               for log_ in spans[rejected[0]].get("logs", []))
    # client -> relay (the first command: the client's start wrote it) -> payments ->
    # coordinator (its apply, then its send: the worker publishes the commands it commits) ->
    # inventory -> coordinator (apply, send) -> shipping: each hop continues the previous one.
    assert chain(rejected[0]) == [
        CLIENT, "sagaflow-relay", "payments", "sagaflow-coordinator", "sagaflow-coordinator",
        "inventory", "sagaflow-coordinator", "sagaflow-coordinator", "shipping",
    ]
    # The rollback (cancels) descends from the coordinator's apply of shipping's rejection.
    for participant in ("payments", "inventory"):
        cancel = next(sid for sid, s in spans.items() if service[sid] == participant
                      and _tags(s).get("saga.phase") == "cancel")
        path = chain(cancel)
        assert path[:len(chain(rejected[0]))] == chain(rejected[0])
        assert path[-3:] == ["sagaflow-coordinator", "sagaflow-coordinator", participant]
        assert spans[_parent(spans[cancel])]["operationName"].startswith("send ")
        assert _tags(spans[cancel]).get("error") is not True
    applied = [s for sid, s in spans.items() if service[sid] == "sagaflow-coordinator"
               and s["operationName"] == f"process {prefix}.replies"]
    for span in applied:
        t = _tags(span)
        assert t["saga.type"] == "order" and t["saga.version"] == 1
        assert t["saga.apply.outcome"] == "applied"
    assert any(_tags(s).get("db.system") == "postgresql" or
               _tags(s).get("db.system.name") == "postgresql" for s in spans.values())
    assert trace.get_tracer_provider() is not provider  # the test never touched the global

    # The web UI's trace panel reads the same trace from the same API.
    shown = await fetch_trace(jaeger_query, trace_id, wait=5)
    assert shown.problem is None and shown.view is not None
    assert {CLIENT, "sagaflow-coordinator", "sagaflow-relay", *SERVICES} <= set(
        shown.view.services)
    assert [r.operation for r in shown.view.rows if r.depth == 0] == ["place order"]
    assert any(r.error and r.service == "shipping" for r in shown.view.rows)
    gone = await fetch_trace(jaeger_query, "f" * 32, wait=5)
    assert gone.view is None and gone.problem is not None and "no trace" in gone.problem
