"""The invariant auditor every chaos scenario ends with.

It reads the coordinator's and the participants' databases (never the processes' memory) and
returns every violation of the design's invariants as a line of text:

* every saga settled: ``completed`` / ``compensated`` / ``cancelled``, or ``dead`` with a reason;
* each participant's business effect happened exactly once per saga step: per saga the ledger
  is ``[]``, ``[reserved]``, ``[reserved, <confirm>]`` or ``[reserved, <cancel>]`` and agrees
  with the saga's outcome (a completed saga confirmed everything, a compensated one confirmed
  nothing); balances and stock equal opening values plus the ledger;
* no confirm after a cancel (both can never appear for one step);
* the outbox drained (no row left, no outbox dead letter) and no timer outlived its saga;
* every poison message is kept as a dead letter where it was consumed, and no real message is;
* the history of every saga replays to its stored snapshot (``store.verify``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from coordinator.runtime.worker import build_registry
from coordinator.store import SagaStore
from examples.services.inventory import INITIAL_STOCK
from examples.services.payments import BROKE_CUSTOMER, OPENING_BALANCE
from participant_sdk.protocol import ProtocolError, decode_reply
from tests.chaos.support.driver import Order
from tests.chaos.support.stack import SERVICES, ChaosStack

TERMINAL = ("completed", "compensated", "cancelled")

#: Ledger shapes allowed per (saga, step): confirm kind, cancel kind.
_KINDS = {
    "payments": ("reserved", "captured", "released"),
    "inventory": ("reserved", "committed", "released"),
    "shipping": ("created", None, "cancelled"),
}


@dataclass(frozen=True)
class Poison:
    """A bad message the test produced, and the database whose dead letters must keep it."""

    role: str  # "coordinator" or a participant name
    topic: str
    payload: bytes
    label: str


@dataclass
class Audit:
    sagas: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    verified: int = 0
    #: Child sagas found (their effects are checked with their order's).
    children: int = 0
    #: Orders that should have completed but rolled back (allowed under faults), with why.
    rolled_back_ok: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        self.violations.append(text)


async def _rows(dsn: str, query: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query))
    finally:
        await conn.close()


async def audit(
    stack: ChaosStack,
    orders: list[Order],
    *,
    poison: list[Poison] = (),  # type: ignore[assignment]
    unknown_sagas: set[uuid.UUID] = frozenset(),  # type: ignore[assignment]
    forged_commands: set[uuid.UUID] = frozenset(),  # type: ignore[assignment]
) -> Audit:
    """Check every invariant; ``unknown_sagas`` are ids the test used in forged messages, and
    the replies to ``forged_commands`` must be kept as coordinator dead letters."""
    result = Audit(sagas=len(orders))
    by_id = {o.saga_id: o for o in orders}
    coord = stack.dsn("coordinator")
    rows = await _rows(coord, "SELECT id, saga_type, status, snapshot, parent_id FROM sagas")
    sagas = [r for r in rows if r["parent_id"] is None]
    children = [r for r in rows if r["parent_id"] is not None]
    status_of = {r["id"]: r["status"] for r in sagas}
    # A child saga's effects count as its order's: the ledgers are checked per order.
    owner = {r["id"]: r["parent_id"] for r in children}
    kinds = Counter(r["saga_type"] for r in sagas)
    wanted = Counter(o.saga_type for o in orders)
    if kinds != wanted:
        result.fail(f"saga types stored {dict(kinds)}, started {dict(wanted)}")
    result.statuses = Counter(status_of.values())
    for r in sagas:
        if r["id"] not in by_id:
            result.fail(f"saga {r['id']} exists but was never started by the test")
    for order in orders:
        status = status_of.get(order.saga_id)
        if status is None:
            result.fail(f"saga {order.saga_id} ({order.kind}) was never stored")
        elif status not in (*TERMINAL, "dead"):
            result.fail(f"saga {order.saga_id} ({order.kind}) stuck in {status}")
        elif order.kind != "ok" and status == "completed":
            result.fail(f"saga {order.saga_id} ({order.kind}) completed")
    reasons = {r["id"]: json.loads(r["snapshot"]).get("reason") for r in sagas}
    result.rolled_back_ok = [
        f"{o.saga_id}: {status_of[o.saga_id]}: {reasons.get(o.saga_id)}" for o in orders
        if o.kind == "ok" and status_of.get(o.saga_id) in ("compensated", "dead")
    ]
    for r in rows:
        if r["status"] == "dead" and not json.loads(r["snapshot"]).get("reason"):
            result.fail(f"saga {r['id']} is dead without a reason")
    for r in children:
        if r["parent_id"] not in by_id:
            result.fail(f"child saga {r['id']} of {r['parent_id']}, which the test never started")
        elif status_of.get(r["parent_id"]) in TERMINAL and r["status"] not in TERMINAL:
            result.fail(f"child saga {r['id']} is {r['status']} but its parent "
                        f"{r['parent_id']} is {status_of[r['parent_id']]}")
    result.children = len(children)
    started = Counter(r["parent_id"] for r in children)
    tries_of = {r["saga_id"]: r["tries"] for r in await _rows(
        coord, "SELECT saga_id, coalesce((state->'attempts'->>'try')::int, 0) AS tries "
        "FROM saga_nodes WHERE key = 'fulfil'")}
    for r in sagas:  # one child per try of a child node, never a second
        tries = tries_of.get(r["id"], 0)
        if started[r["id"]] != tries:
            result.fail(f"saga {r['id']} tried its child node {tries} time(s) but has "
                        f"{started[r['id']]} child saga(s)")

    await _audit_ledgers(stack, by_id, status_of, unknown_sagas, owner, result)
    await _audit_queues(coord, result)
    await _audit_dead_letters(stack, poison, unknown_sagas, forged_commands, result)

    registry = build_registry(list(stack.sagas), topic_prefix=stack.prefix)
    async with await SagaStore.open(coord, registry, min_size=1, max_size=4) as store:
        # Four at a time: a failover scenario's thousands of sagas would take minutes in turn.
        ids = [r["id"] for r in rows]
        for start in range(0, len(ids), 4):
            chunk = ids[start:start + 4]
            verdicts = await asyncio.gather(*(store.verify(saga_id) for saga_id in chunk))
            for saga_id, verdict in zip(chunk, verdicts, strict=True):
                if verdict.ok:
                    result.verified += 1
                else:
                    result.fail(f"saga {saga_id}: replay != snapshot: {verdict.differences[:3]}")
    return result


async def _audit_ledgers(
    stack: ChaosStack,
    orders: dict[uuid.UUID, Order],
    status_of: dict[uuid.UUID, str],
    unknown: set[uuid.UUID],
    owner: dict[uuid.UUID, uuid.UUID],
    result: Audit,
) -> None:
    queries = {
        "payments": "SELECT saga_id, step, kind, customer AS who, amount FROM payments_ledger"
                    " ORDER BY id",
        "inventory": "SELECT saga_id, step, kind, sku AS who, quantity AS amount"
                     " FROM inventory_ledger ORDER BY id",
        "shipping": "SELECT saga_id, step, kind, shipment_id::text AS who, 1 AS amount"
                    " FROM shipping_ledger ORDER BY id",
    }
    for service in SERVICES:
        rows = await _rows(stack.dsn(service), queries[service])
        per_saga: dict[uuid.UUID, list[asyncpg.Record]] = defaultdict(list)
        totals: dict[str, Counter[str]] = defaultdict(Counter)
        for row in rows:
            per_saga[owner.get(row["saga_id"], row["saga_id"])].append(row)
            totals[row["who"]][row["kind"]] += row["amount"]
        for saga_id in per_saga:
            if saga_id not in orders and saga_id not in unknown:
                result.fail(f"{service}: effects for saga {saga_id} the test never started")
        for saga_id, order in orders.items():
            _check_saga_ledger(service, order, status_of.get(saga_id), per_saga.get(saga_id, []),
                               result)
        await _check_balances(stack, service, totals, per_saga, owner, result)


def _check_saga_ledger(
    service: str, order: Order, status: str | None, entries: list[asyncpg.Record],
    result: Audit,
) -> None:
    forward, confirm, cancel = _KINDS[service]
    kinds = [e["kind"] for e in entries]
    steps = {e["step"] for e in entries}
    tag = f"{service}: saga {order.saga_id} ({order.kind}, {status})"
    if len(steps) > 1:
        result.fail(f"{tag}: effects under several steps {sorted(steps)}")
    shapes = [[], [forward], [forward, cancel]]
    if confirm is not None:
        shapes.append([forward, confirm])
    if kinds not in shapes:
        result.fail(f"{tag}: ledger {kinds} is not one effect per phase in order")
        return
    expected_amount = {"payments": order.input["amount_cents"],
                       "inventory": order.input["quantity"], "shipping": 1}[service]
    for e in entries:
        if e["amount"] != expected_amount:
            result.fail(f"{tag}: {e['kind']} of {e['amount']}, expected {expected_amount}")
    refused = (service == "payments" and order.kind == "broke") or (
        service == "inventory" and order.kind == "oos")
    if refused and kinds:
        result.fail(f"{tag}: a refused try left effects {kinds}")
    if status == "completed":
        want = [forward, confirm] if confirm is not None else [forward]
        if kinds != want:
            result.fail(f"{tag}: completed saga has ledger {kinds}, expected {want}")
    elif status in ("compensated", "cancelled"):
        if kinds not in ([], [forward, cancel]):
            result.fail(f"{tag}: rolled-back saga has ledger {kinds}")


async def _check_balances(
    stack: ChaosStack,
    service: str,
    totals: dict[str, Counter[str]],
    per_saga: dict[uuid.UUID, list[asyncpg.Record]],
    owner: dict[uuid.UUID, uuid.UUID],
    result: Audit,
) -> None:
    dsn = stack.dsn(service)
    if service == "payments":
        for r in await _rows(dsn, "SELECT customer, balance, held FROM payments_accounts"):
            t = totals.get(r["customer"], Counter())
            opening = 0 if r["customer"] == BROKE_CUSTOMER else OPENING_BALANCE
            balance = opening - t["reserved"] + t["released"]
            held = t["reserved"] - t["captured"] - t["released"]
            if (r["balance"], r["held"]) != (balance, held):
                result.fail(f"payments: account {r['customer']} balance/held "
                            f"{r['balance']}/{r['held']}, ledger says {balance}/{held}")
    elif service == "inventory":
        for r in await _rows(dsn, "SELECT sku, available, reserved FROM inventory_stock"):
            t = totals.get(r["sku"], Counter())
            opening = 0 if r["sku"].startswith("OOS-") else INITIAL_STOCK
            available = opening - t["reserved"] + t["released"]
            reserved = t["reserved"] - t["committed"] - t["released"]
            if (r["available"], r["reserved"]) != (available, reserved):
                result.fail(f"inventory: sku {r['sku']} available/reserved "
                            f"{r['available']}/{r['reserved']}, ledger says "
                            f"{available}/{reserved}")
    else:
        for r in await _rows(dsn, "SELECT saga_id, status FROM shipping_shipments"):
            order_id = owner.get(r["saga_id"], r["saga_id"])
            kinds = [e["kind"] for e in per_saga.get(order_id, [])]
            want = {"created": ["created"], "cancelled": ["created", "cancelled"]}.get(r["status"])
            if kinds != want:
                result.fail(f"shipping: shipment of saga {r['saga_id']} is {r['status']} "
                            f"but the ledger says {kinds}")


async def _audit_queues(coord: str, result: Audit) -> None:
    conn = await asyncpg.connect(coord)
    try:
        outbox = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox")
        outbox_dead = await conn.fetchval("SELECT count(*) FROM sagaflow_outbox_dead_letter")
        stale_timers = await conn.fetchval(
            "SELECT count(*) FROM timers t JOIN sagas s ON s.id = t.saga_id"
            " WHERE s.status = ANY($1::text[])", list(TERMINAL))
    finally:
        await conn.close()
    if outbox:
        result.fail(f"outbox not drained: {outbox} rows left")
    if outbox_dead:
        result.fail(f"outbox dead letters: {outbox_dead} commands could not be published")
    if stale_timers:
        result.fail(f"{stale_timers} timers left for finished sagas")


async def _audit_dead_letters(
    stack: ChaosStack, poison: list[Poison], unknown: set[uuid.UUID],
    forged_commands: set[uuid.UUID], result: Audit,
) -> None:
    expected: dict[str, list[Poison]] = defaultdict(list)
    for p in poison:
        expected[p.role].append(p)
    for role in ("coordinator", *SERVICES):
        rows = await _rows(stack.dsn(role),
                           "SELECT source, topic, payload, reason FROM sagaflow_dead_letters")
        result.dead_letters[role] = len(rows)
        payloads = Counter(bytes(r["payload"]) if r["payload"] is not None else b""
                           for r in rows)
        wanted = Counter(p.payload for p in expected[role])
        for p in expected[role]:
            if payloads[p.payload] < 1:
                result.fail(f"poison {p.label} on {p.topic} is not a dead letter in {role}")
        answered: set[uuid.UUID] = set()
        for r in rows:
            raw = bytes(r["payload"]) if r["payload"] is not None else b""
            if wanted[raw]:
                continue
            saga = _reply_saga(raw) if role == "coordinator" else None
            if saga is not None and saga in unknown:
                answered.add(saga)
                continue  # the reply to a forged command for an unknown saga
            result.fail(f"{role}: unexpected dead letter from {r['source']} on {r['topic']}: "
                        f"{r['reason'][:200]}")
        if role == "coordinator":
            for saga in forged_commands - answered:
                result.fail(f"the reply to forged command for saga {saga} is no dead letter")


def _reply_saga(raw: bytes) -> uuid.UUID | None:
    try:
        return decode_reply(raw).saga_id
    except ProtocolError:
        return None


def summary(name: str, audit_: Audit, faults: dict[str, int], seconds: float,
            extra: dict[str, Any] | None = None) -> str:
    """One printable block per scenario: sagas, faults injected, violations."""
    fault_text = ", ".join(f"{k}={v}" for k, v in faults.items())
    lines = [
        f"[chaos] {name}: sagas={audit_.sagas} statuses={dict(audit_.statuses)} "
        f"verified={audit_.verified} children={audit_.children}",
        f"[chaos] {name}: faults: {fault_text} (total {sum(faults.values())})",
        f"[chaos] {name}: dead letters {audit_.dead_letters}"
        + (f" {extra}" if extra else ""),
        f"[chaos] {name}: orders meant to complete that rolled back: "
        f"{len(audit_.rolled_back_ok)} {audit_.rolled_back_ok[:3]}",
        f"[chaos] {name}: invariant violations={len(audit_.violations)} in {seconds:.1f}s",
    ]
    lines += [f"[chaos] {name}:   VIOLATION {v}" for v in audit_.violations[:40]]
    return "\n".join(lines)
