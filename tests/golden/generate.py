"""Write the golden files of every stored and wire format: ``python -m tests.golden.generate``.

It writes only documents that have no file yet (the output goes to
``tests/golden/format-<N>/``): a file, once written, is what a build wrote, and
``tests/unit/test_golden_formats.py`` checks the current readers still decode them. Every
document comes from the code that writes it: the pure core driven by the Simulator (the store
calls the same ``advance``), and the store's own serialisers for the saga row (spine), the
node rows, the history rows and the timer rows; the wire envelopes from
``participant_sdk.protocol`` and the examples of ``docs/wire-protocol.md``.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from coordinator.engine import compile_saga
from coordinator.engine.events import (
    Migrated,
    OperatorRepair,
    ParentRequest,
    RepairVerb,
    TimerKind,
    UpdateApplied,
)
from coordinator.engine.simulate import Simulator
from coordinator.engine.state import STATE_FORMAT_VERSION
from coordinator.language.calendars import BusinessCalendar
from coordinator.language.nodes import Patched, SagaStep, Sleep, WaitForSignal
from coordinator.language.saga import Saga
from coordinator.runtime.signal_wire import SignalEnvelope
from coordinator.schedules.model import Overlap, ScheduleDefinition
from coordinator.schedules.repository import stored_columns
from coordinator.schedules.spec import IntervalSpec, ScheduleSpec
from coordinator.store.nodes import node_writes, spine_json
from examples.checkout_saga import CheckoutSaga
from examples.expense_saga import ExpenseSaga
from examples.order_saga import OrderInput, OrderSaga
from participant_sdk.protocol import (
    ErrorInfo,
    ErrorKind,
    Outcome,
    Phase,
    decode_command,
    make_reply,
)
from tests.unit.test_engine_fixtures import ORDER_INPUT

HERE = Path(__file__).parent
SAGA_ID = uuid.UUID("7f1e2d3c-4b5a-4968-8776-655443322110")


def _order_run() -> tuple[Simulator, dict[str, Any]]:
    """An order saga: a transient failure and a retry, then success; snapshots on the way."""
    sim = Simulator(compile_saga(OrderSaga), saga_id=SAGA_ID)
    out: dict[str, Any] = {}
    sim.start(ORDER_INPUT, trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16
                                          + "-01"})
    first = sim.last()
    out["command"] = first
    out["deadline_timer"] = sim.next_timer(TimerKind.DEADLINE)
    failed = sim.reply_to(first, Outcome.FAILED, kind=ErrorKind.TRANSIENT, message="db busy")
    out["reply_failed"] = failed
    out["retry_timer"] = sim.next_timer(TimerKind.RETRY)
    sim.tick(timedelta(seconds=5))
    sim.fire_next(TimerKind.RETRY)
    out["running"] = sim.current
    while not sim.current.status.is_terminal:
        sim.reply_to(next(iter(sim.pending.values())))
    out["completed"] = sim.current
    return sim, out


def _checkout_tree() -> Any:
    """The checkout example mid-flight: for-each items and race branches as node rows."""
    sim = Simulator(compile_saga(CheckoutSaga), saga_id=uuid.UUID(int=2))
    sim.start({"order_id": "o-2", "customer_id": "c-2", "amount_cents": 900,
               "address": "1 Main St", "lines": [{"sku": "a", "quantity": 1},
                                                 {"sku": "b", "quantity": 2}]})
    while not any(c.step.startswith("carrier_") for c in sim.pending.values()):
        sim.reply_to(next(iter(sim.pending.values())))
    return sim.current


class _Paid(BaseModel):
    amount_cents: int


class _WaitingOrder(Saga):
    """The long-running node kinds: a delayed start, a sleep, a wait for a signal."""

    name = "golden_waits"
    version = 1
    input_model = OrderInput
    steps = (
        Sleep("cool_off", timedelta(days=3)),
        WaitForSignal("payment", "paid", payload=_Paid, timeout=timedelta(days=7)),
        SagaStep("create_shipment", "shipping", "ship", compensable=True),
    )


def _waits_run() -> tuple[Simulator, dict[str, Any]]:
    """Scheduled, then sleeping, then waiting for a signal that arrives: a document each."""
    sim = Simulator(compile_saga(_WaitingOrder), saga_id=uuid.UUID(int=3))
    out: dict[str, Any] = {}
    sim.start(ORDER_INPUT, start_at=sim.now + timedelta(hours=1))
    out["scheduled"] = sim.current
    out["start_timer"] = sim.next_timer(TimerKind.START)
    sim.fire_next(TimerKind.START)
    out["sleeping"] = sim.current
    out["sleep_timer"] = sim.next_timer(TimerKind.SLEEP)
    sim.fire_next(TimerKind.SLEEP)
    out["waiting"] = sim.current
    out["signal_timer"] = sim.next_timer(TimerKind.SIGNAL_TIMEOUT)
    sim.signal("paid", {"amount_cents": 1250}, signal_id="pay-1")
    return sim, out


class _PlainOrder(Saga):
    """Version 1 of an order as first deployed."""

    name = "golden_guarded"
    version = 1
    input_model = OrderInput
    steps = (
        SagaStep("reserve", "inventory", "reserve", compensable=True),
        SagaStep("charge", "payments", "charge", compensable=True),
    )


class _GuardedOrder(_PlainOrder):
    """The same version after two changes, each behind a version guard."""

    steps = (
        SagaStep("reserve", "inventory", "reserve", compensable=True),
        Patched("new-charge", new=SagaStep("charge_v2", "payments", "charge", compensable=True),
                old=SagaStep("charge", "payments", "charge", compensable=True)),
        Patched("fraud-check", new=SagaStep("fraud", "risk", "score", compensable=False)),
    )


def _guarded_run() -> Simulator:
    """A saga charging on the old code when the guards were deployed: it keeps the old charge
    and takes the new fraud check (which comes after the point it had reached)."""
    sim = Simulator(compile_saga(_PlainOrder), saga_id=uuid.UUID(int=4))
    sim.start(ORDER_INPUT)
    sim.reply_to(sim.last())
    sim.definition = compile_saga(_GuardedOrder)  # the deploy
    sim.reply_to(sim.last())
    assert sim.current.patches == {"new-charge": "old", "fraud-check": "new"}
    return sim


def _task_run() -> tuple[Simulator, dict[str, Any]]:
    """An expense waiting on its manager's task (reminded, escalated), then approved."""
    sim = Simulator(compile_saga(ExpenseSaga), saga_id=uuid.UUID(int=9),
                    now=datetime(2026, 3, 2, 9, tzinfo=UTC))
    sim.start({"expense_id": "x-1", "employee": "erin", "manager": "mia",
               "amount_cents": 12_000}, started_by="erin")
    sim.reply_to(sim.last())
    out: dict[str, Any] = {kind: sim.next_timer(TimerKind(f"task_{kind}"))
                           for kind in ("reminder", "escalation", "timeout")}
    sim.fire_next(TimerKind.TASK_REMINDER)
    sim.fire_next(TimerKind.TASK_ESCALATION)
    task = next(iter(sim.tasks))
    sim.act(task, "claim", "mia")
    out["waiting"] = sim.current
    sim.act(task, "complete", "mia", data={"outcome": "approve", "comment": "fine"})
    return sim, out


def _node_rows(state: Any) -> list[dict[str, Any]]:
    writes = node_writes([(state.saga_id, None, state, ())])
    return [{"key": k, "ordinal": o, "state": json.loads(s)}
            for _, k, o, s in zip(*writes.upsert_args(), strict=True)]


def _timer_row(timer: Any, saga_id: uuid.UUID = SAGA_ID) -> dict[str, Any]:
    """A ``timers`` row as the writer inserts it (id, step, phase, attempt, kind)."""
    return {"id": timer.timer_id, "saga_id": str(saga_id), "step": timer.step,
            "phase": timer.phase.value if timer.phase is not None else None,
            "attempt": timer.attempt, "kind": timer.kind.value, "event": None}


def documents() -> dict[str, Any]:
    guarded = _guarded_run()
    sim, run = _order_run()
    docs: dict[str, Any] = {
        "stored/snapshot-running.json": run["running"].to_json(),
        "stored/snapshot-completed.json": run["completed"].to_json(),
        "stored/spine-running.json": json.loads(spine_json(run["running"])),
        "stored/nodes-running.json": _node_rows(run["running"]),
        "stored/timer-retry.json": _timer_row(run["retry_timer"]),
        "stored/snapshot-tree-running.json": _checkout_tree().to_json(),
        "stored/timer-deadline.json": _timer_row(run["deadline_timer"]),
        "stored/snapshot-patched.json": guarded.current.to_json(),
        # The history event that recorded the guards' decisions.
        "stored/event-patched.json": guarded.history[-1].event.to_json(),
        "stored/event-migrated.json": Migrated(from_version=1, to_version=2,
                                               migration="v1->v2", actor="alice",
                                               reason="ship renamed").to_json(),
    }
    docs["stored/history.json"] = [
        {"seq": seq, "event": d.history[0].event.to_json(), "actor": "worker",
         "annotation": [h.note for h in d.history], "ignored": d.ignored}
        for seq, d in enumerate(sim.decisions, start=1)
    ]
    kinds = {e["event"]["type"]: e["event"] for e in docs["stored/history.json"]}
    waits, waited = _waits_run()
    for status in ("scheduled", "sleeping", "waiting"):
        docs[f"stored/snapshot-{status}.json"] = waited[status].to_json()
    for timer in ("start_timer", "sleep_timer", "signal_timer"):
        row = _timer_row(waited[timer], waits.saga_id)
        docs[f"stored/timer-{row['kind']}.json"] = row
    kinds |= {d.history[0].event.to_json()["type"]: d.history[0].event.to_json()
              for d in waits.decisions if d.history}
    tasks, tasked = _task_run()
    docs["stored/snapshot-task-waiting.json"] = tasked["waiting"].to_json()
    for kind in ("reminder", "escalation", "timeout"):
        docs[f"stored/timer-task_{kind}.json"] = _timer_row(tasked[kind], tasks.saga_id)
    kinds["task_acted"] = tasks.history[-1].event.to_json()
    kinds["operator_repair"] = OperatorRepair(
        verb=RepairVerb.SKIP, actor="alice", reason="paid by hand", step="reserve_funds",
        result={"held": 1250}).to_json()
    request = ParentRequest(parent_id=uuid.UUID(int=7), step="pay", phase=Phase.CONFIRM,
                            attempt=1, message_id=uuid.UUID(int=8), reason="parent succeeded")
    kinds["parent_request"] = request.to_json()
    kinds["update_applied"] = UpdateApplied(
        update_id="addr-1", name="change_address", payload={"address": "2 New Street"},
        sender="api:ops").to_json()
    for kind, event in sorted(kinds.items()):
        docs[f"stored/event-{kind}.json"] = event
    # A delivery: a timers row holding an event for another saga (here a parent's request).
    docs["stored/timer-delivery.json"] = {
        "id": f"{SAGA_ID}:deliver:{request.message_id}", "saga_id": str(SAGA_ID),
        "step": None, "phase": None, "attempt": None, "kind": "deliver",
        "event": request.to_json()}
    command = run["command"]
    docs["wire/command.json"] = command.model_dump(mode="json")
    docs["wire/reply-ok.json"] = make_reply(command, Outcome.OK, result={"held": 1250}
                                            ).model_dump(mode="json")
    docs["wire/reply-failed.json"] = make_reply(
        command, Outcome.FAILED, error=ErrorInfo(kind=ErrorKind.TRANSIENT, message="db busy",
                                                 type="TimeoutError")).model_dump(mode="json")
    docs["wire/reply-rejected.json"] = make_reply(
        command, Outcome.REJECTED, result={"reason": "card declined"},
        error=ErrorInfo(kind=ErrorKind.BUSINESS, message="card declined")
    ).model_dump(mode="json")
    docs["wire/doc-command-example.json"] = _doc_command_example()
    for name, definition in _schedules().items():
        docs[f"stored/schedule-{name}.json"] = schedule_row(definition)
    docs["wire/signal.json"] = SignalEnvelope(
        saga_id=waits.saga_id, name="paid", signal_id="pay-1", payload={"amount_cents": 1250},
        sender="payments").model_dump(mode="json")
    return docs


def _schedules() -> dict[str, ScheduleDefinition]:
    """A cron and interval schedule, and a one-shot one on a business calendar."""
    return {
        "cron": ScheduleDefinition(
            id="nightly-report", saga_type="order_saga", saga_version=1,
            input={"order_id": "o-1"}, fire_time_field="as_of",
            spec=ScheduleSpec(cron=("0 2 * * *",), timezone="Europe/Paris",
                              intervals=(IntervalSpec(every=timedelta(hours=6),
                                                      offset=timedelta(minutes=15)),),
                              start_at=datetime(2026, 1, 1, tzinfo=UTC)),
            overlap=Overlap.BUFFER_ONE, catchup_window=timedelta(minutes=5),
            jitter=timedelta(seconds=30), note="reports"),
        "calendar": ScheduleDefinition(
            id="month-end", saga_type="order_saga",
            spec=ScheduleSpec(at=(datetime(2026, 12, 31, 18, tzinfo=UTC),),
                              calendar=BusinessCalendar(country="DE", subdivision="BY",
                                                        closed_dates=(date(2026, 12, 24),),
                                                        on_closed="shift")),
            paused=True),
    }


def schedule_row(definition: ScheduleDefinition) -> dict[str, Any]:
    """A ``schedules`` row's definition columns as the repository writes them (the JSON
    columns decoded, so the file reads as the row's JSON)."""
    columns = stored_columns(definition)
    return {"id": definition.id, **columns, "input": json.loads(columns["input"]),
            "spec": json.loads(columns["spec"])}


def _doc_command_example() -> dict[str, Any]:
    """The command example of docs/wire-protocol.md §4.1, checked to decode as written."""
    text = (HERE.parent.parent / "docs" / "wire-protocol.md").read_text()
    block = text.split("### 4.1", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    decode_command(block.encode())
    data: dict[str, Any] = json.loads(block)
    return data


def main(argv: list[str]) -> int:
    """Write the documents that have no golden file yet; never rewrite one (what a build
    wrote stays what the readers must decode, so a new field shows up only in new files)."""
    target = HERE / f"format-{STATE_FORMAT_VERSION}"
    written = 0
    for name, doc in documents().items():
        path = target / name
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        written += 1
    print(f"{target}: {written} new golden files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
