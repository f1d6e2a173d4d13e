"""The README's main command: the whole demo stack in separate processes on real services."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid

import asyncpg
import httpx
import pytest

from examples.demo import HOME as DEMO_HOME
from examples.stack import dsn_for

pytestmark = pytest.mark.e2e


# The same demo with the order and checkout sagas as Python classes and as YAML definitions:
# every outcome, ledger row and trace below is the same.
@pytest.mark.parametrize("definitions", ["classes", "yaml"])
def test_demo_runs_orders_and_checkouts_to_completion_and_to_compensation(
    pg_url: str, kafka_bootstrap: str, jaeger_otlp: str, jaeger_query: str, definitions: str
) -> None:
    # As the README says: OTEL_EXPORTER_OTLP_ENDPOINT set, then the demo.
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger_otlp}
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--postgres", pg_url, "--kafka", kafka_bootstrap,
         "--once", "--definitions", definitions],
        capture_output=True, text=True, timeout=240, check=False, env=env,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert ("as YAML definitions" if definitions == "yaml" else "as Python classes") in out
    worker_log = (DEMO_HOME / "demo" / "coordinator.log").read_text()
    loaded = re.search(r"started \(group .*; sagas: .* from (.*)\)$", worker_log, re.M)
    assert loaded is not None, worker_log
    assert ("examples/order_saga.yaml" in loaded[1]) is (definitions == "yaml"), loaded[0]
    assert "== order that completes" in out and "-> completed" in out
    assert "== order that compensates" in out and "-> compensated" in out
    assert "inventory reserve_stock.try -> rejected (out of stock)" in out
    assert out.count("equals snapshot: True") == 6
    # The nested order: its child saga confirmed with it, or rolled back before it failed.
    assert re.search(r"^== order_nested that completes: saga \S+ -> completed$", out, re.M)
    assert re.search(r"^== order_nested that compensates: saga \S+ -> compensated$", out, re.M)
    assert re.search(r"child saga order_fulfilment \S+ \(node fulfil\) -> completed; "
                     r"replay of \d+ events equals its snapshot: True", out), out
    assert re.search(r"child saga order_fulfilment \S+ \(node fulfil\) -> compensated; "
                     r"replay of \d+ events equals its snapshot: True", out), out
    assert "captured alice 2500" in out and "released alice 4000" in out
    assert "exit 0" in out and "exit -" not in out

    sagas = {label: (uuid.UUID(saga_id), status) for label, saga_id, status in re.findall(
        r"^== (checkout that \w+): saga (\S+) -> (\w+)$", out, re.M)}
    assert sagas.keys() == {"checkout that completes", "checkout that compensates"}, out
    won, won_status = sagas["checkout that completes"]
    lost, lost_status = sagas["checkout that compensates"]
    assert (won_status, lost_status) == ("completed", "compensated")
    assert 'the race "ship" was won by carrier_a' in out

    # What the participants themselves recorded, read from their own databases.
    payments = _rows(pg_url, "payments", "SELECT kind, amount FROM payments_ledger"
                     " WHERE saga_id = $1 ORDER BY id", won, lost)
    assert payments[won] == [("reserved", 5400), ("captured", 5400)]
    assert payments[lost] == [("reserved", 1800), ("released", 1800)]

    stock = _rows(pg_url, "inventory", "SELECT step, kind, sku FROM inventory_ledger"
                  " WHERE saga_id = $1 ORDER BY id", won, lost)
    assert _by_step(stock[won]) == {
        "lines[0].reserve_stock": [("reserved", "BOOK-1"), ("committed", "BOOK-1")],
        "lines[1].reserve_stock": [("reserved", "MUG-2"), ("committed", "MUG-2")],
        "lines[2].reserve_stock": [("reserved", "PEN-3"), ("committed", "PEN-3")],
    }
    # Out of stock at line 1: nothing of it was reserved, and every line that was (line 0,
    # and line 2 when it had started) was released; nothing was committed.
    released = _by_step(stock[lost])
    assert "lines[1].reserve_stock" not in released
    assert released["lines[0].reserve_stock"] == [("reserved", "MUG-2"), ("released", "MUG-2")]
    assert released.get("lines[2].reserve_stock", []) in (
        [], [("reserved", "PEN-3"), ("released", "PEN-3")]), released

    carriers = {carrier: _rows(pg_url, carrier, "SELECT kind FROM carrier_ledger"
                               " WHERE saga_id = $1 ORDER BY id", won, lost)
                for carrier in ("carrier_a", "carrier_b")}
    assert carriers["carrier_a"][won] == [("booked",)]  # the fast carrier won the race
    assert carriers["carrier_b"][won] == [("booked",), ("cancelled",)]  # the loser undone
    assert carriers["carrier_a"][lost] == carriers["carrier_b"][lost] == []  # never asked

    # The trace docs/observability.md shows: one trace from the demo's start call through the
    # coordinator to the participants, read back from Jaeger.
    services = _trace_services(jaeger_query, won)
    assert {"sagaflow-demo", "payments", "inventory", "carrier_a"} <= services, services


def _trace_services(jaeger_query: str, saga_id: uuid.UUID) -> set[str]:
    """Services in the Jaeger trace that holds payments' spans of ``saga_id``."""
    tags = json.dumps({"saga.id": str(saga_id)})
    deadline = time.monotonic() + 30
    found: set[str] = set()
    while time.monotonic() < deadline:
        response = httpx.get(f"{jaeger_query}/api/traces", params={
            "service": "payments", "tags": tags, "lookback": "1h", "limit": "5"}, timeout=5)
        if response.status_code == 200:
            for data in response.json().get("data") or []:
                found |= {p["serviceName"] for p in data["processes"].values()}
        if "sagaflow-demo" in found and "carrier_a" in found:
            break
        time.sleep(1)
    return found


def _rows(pg_url: str, service: str, query: str, *saga_ids: uuid.UUID
          ) -> dict[uuid.UUID, list[tuple[object, ...]]]:
    """``query``'s rows per saga id, on the demo's database of ``service``."""
    async def fetch() -> dict[uuid.UUID, list[tuple[object, ...]]]:
        conn = await asyncpg.connect(dsn_for(pg_url, f"demo_{service}"))
        try:
            return {s: [tuple(r) for r in await conn.fetch(query, s)] for s in saga_ids}
        finally:
            await conn.close()

    return asyncio.run(fetch())


def _by_step(rows: list[tuple[object, ...]]) -> dict[object, list[tuple[object, ...]]]:
    out: dict[object, list[tuple[object, ...]]] = {}
    for step, *rest in rows:
        out.setdefault(step, []).append(tuple(rest))
    return out
