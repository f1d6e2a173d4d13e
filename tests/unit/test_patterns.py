"""The pattern library on the pure core: each template's happy path and its rollback, the
catalog's versions and change logs, and the generated docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.engine import compile_saga
from coordinator.engine.migrate import plan_migration
from coordinator.engine.simulate import Simulator
from coordinator.language.saga import DefinitionError, Saga
from coordinator.sagas.patterns import (
    PATTERNS,
    approval_saga,
    etl_batch_saga,
    onboarding_saga,
    order_saga,
    participant_approval_saga,
    refund_saga,
)
from coordinator.sagas.patterns.docs import render
from participant_sdk.protocol import Outcome

ROOT = Path(__file__).resolve().parents[2]

ORDER_IN = {"order_id": "o1", "customer_id": "c1", "amount_cents": 500, "address": "1 Main St",
            "lines": [{"sku": "a", "quantity": 1}, {"sku": "b", "quantity": 2}]}
ETL_IN = {"batch_id": "b1", "dataset": "sales", "partitions": ["p1", "p2", "p3"]}
ONBOARD_IN = {"customer_id": "c1", "email": "a@b.c", "plan": "pro", "products": ["x", "y"]}
REFUND_IN = {"refund_id": "r1", "order_id": "o1", "amount_cents": 500, "returned": {"a": 1}}
APPROVAL_IN = {"request_id": "q1", "requester": "ann", "summary": "pay invoice 7",
               "details": {"invoice": 7}}


def run(cls: type[Saga], data: dict[str, Any], fail: str | None = None
        ) -> tuple[str, list[tuple[str, str]]]:
    """Answer every command ok, except the forward phase of step ``fail`` (rejected);
    return the final status and the (step key, phase) of every command sent, in order."""
    sim = Simulator(compile_saga(cls))
    sim.start(data)
    while sim.pending:
        command = next(iter(sim.pending.values()))
        failing = command.step.rsplit(".", 1)[-1] == fail and command.phase.is_forward
        sim.reply_to(command, Outcome.REJECTED if failing else Outcome.OK)
    assert sim.replayed() == sim.current
    return sim.current.status.value, [(c.step, c.phase.value) for c in sim.sent]


def test_approval_version_1_acts_only_on_the_approvals_service_yes() -> None:
    cls = participant_approval_saga(participant="payments", action="pay_invoice")
    status, sent = run(cls, APPROVAL_IN)
    assert status == "completed"
    assert sent == [("approve", "try"), ("act", "action"), ("approve", "confirm")]
    status, sent = run(cls, APPROVAL_IN, fail="approve")
    assert (status, sent) == ("compensated", [("approve", "try"), ("approve", "cancel")])
    status, sent = run(cls, APPROVAL_IN, fail="act")
    assert status == "compensated" and sent[-1] == ("approve", "cancel")


def test_approval_version_2_asks_people_and_acts_only_on_a_yes() -> None:
    cls = approval_saga(participant="payments", action="pay_invoice", groups=("finance",),
                        approvers_needed=2, approvers_asked=3)
    sim = Simulator(compile_saga(cls))
    sim.start(APPROVAL_IN, started_by=APPROVAL_IN["requester"])
    tasks = sorted(sim.tasks.values(), key=lambda t: t["node"])
    assert [t["node"] for t in tasks] == ["approver_1", "approver_2", "approver_3"]
    assert all(t["excluded_users"] == [APPROVAL_IN["requester"]] for t in tasks)
    for task, who in zip(tasks[:2], ("fay", "fred"), strict=True):
        sim.act(task["id"], "claim", who, groups=["finance"])
        sim.act(task["id"], "complete", who, data={"outcome": "approve"})
    assert [(c.step, c.phase.value) for c in sim.sent] == [("act", "action")]
    sim.reply_to(sim.last())
    assert sim.current.status.value == "completed"
    assert sim.tasks[tasks[2]["id"]]["state"] == "cancelled"


def test_approval_version_2_takes_over_approved_version_1_sagas() -> None:
    old = participant_approval_saga(participant="payments", action="pay_invoice")
    new = approval_saga(participant="payments", action="pay_invoice", version=2,
                        migrate_from=old)
    sim = Simulator(compile_saga(old))
    sim.start(APPROVAL_IN)
    waiting = sim.current
    sim.reply_to(sim.last())  # the approvals service said yes
    plan = plan_migration(compile_saga(new), sim.current)
    assert plan.ok and plan.state is not None
    assert plan.state.steps["approval"].result == {
        "outcome": "approve", "comment": "approved by the approvals service"}
    assert not plan_migration(compile_saga(new), waiting).ok  # its try is outstanding


def test_order_holds_payment_and_every_line_then_captures_or_releases_all() -> None:
    status, sent = run(order_saga(), ORDER_IN)
    assert status == "completed"
    assert sent[0] == ("hold_payment", "try")
    assert {s for s in sent if s[1] == "try"} == {
        ("hold_payment", "try"), ("lines[0].reserve_stock", "try"),
        ("lines[1].reserve_stock", "try")}
    assert sent.index(("ship", "action")) > sent.index(("lines[1].reserve_stock", "try"))
    assert {s for s in sent if s[1] == "confirm"} == {
        ("hold_payment", "confirm"), ("lines[0].reserve_stock", "confirm"),
        ("lines[1].reserve_stock", "confirm")}
    status, sent = run(order_saga(), ORDER_IN, fail="ship")
    assert status == "compensated"
    assert {s for s in sent if s[1] == "cancel"} == {
        ("hold_payment", "cancel"), ("lines[0].reserve_stock", "cancel"),
        ("lines[1].reserve_stock", "cancel")}
    _, sent = run(order_saga("digital", shipping=None), ORDER_IN)
    assert not any(step == "ship" for step, _ in sent)


def test_refund_restocks_then_pays_back_and_undoes_the_restock_if_payout_fails() -> None:
    status, sent = run(refund_saga(), REFUND_IN)
    assert (status, sent) == ("completed", [("restock", "action"), ("pay_back", "action")])
    status, sent = run(refund_saga(), REFUND_IN, fail="pay_back")
    assert (status, sent[-1]) == ("compensated", ("restock", "compensate"))
    _, sent = run(refund_saga(), {**REFUND_IN, "returned": {}})
    assert sent == [("pay_back", "action")]  # no goods: restock skipped
    _, sent = run(refund_saga("money_back", inventory=None), REFUND_IN)
    assert sent == [("pay_back", "action")]


def test_etl_batch_publishes_all_partitions_or_unloads_every_loaded_one() -> None:
    status, sent = run(etl_batch_saga(), ETL_IN)
    assert status == "completed" and sent[0] == ("open_batch", "action")
    assert sent[-1] == ("publish", "action") and len(sent) == 5
    status, sent = run(etl_batch_saga(partitions_at_once=1), ETL_IN, fail="load")
    assert status == "compensated"
    # The rejected load is compensated too (it may have been half applied; the barrier
    # makes that harmless), then the batch; partitions 2 and 3 never started.
    assert sent == [("open_batch", "action"), ("partitions[0].load", "action"),
                    ("partitions[0].load", "compensate"), ("open_batch", "compensate")]
    with pytest.raises(DefinitionError):
        etl_batch_saga(partitions_at_once=0)


def test_onboarding_undoes_account_billing_and_access_when_a_grant_fails() -> None:
    status, sent = run(onboarding_saga(), ONBOARD_IN)
    assert status == "completed"
    assert sent.index(("welcome", "action")) > sent.index(("products[1].grant_access", "action"))
    assert sent[-1] == ("set_up_billing", "confirm")  # confirms come after every forward step
    status, sent = run(onboarding_saga(), ONBOARD_IN, fail="grant_access")
    assert status == "compensated"
    undone = [s for s in sent if s[1] in ("cancel", "compensate")]
    assert ("set_up_billing", "cancel") in undone and undone[-1] == ("create_account",
                                                                     "compensate")
    _, sent = run(onboarding_saga("free", billing=None), ONBOARD_IN)
    assert not any(step == "set_up_billing" for step, _ in sent)


def test_every_pattern_has_a_version_a_change_log_and_records_it() -> None:
    assert set(PATTERNS) == {"approval", "order", "refund", "etl_batch", "onboarding"}
    for pattern in PATTERNS.values():
        assert pattern.changes and pattern.changes[-1][0] == pattern.version
        assert [v for v, _ in pattern.changes] == sorted(v for v, _ in pattern.changes)
    built = order_saga("shop_order", version=4)
    assert (built.name, built.version, built.pattern) == ("shop_order", 4, "order@1")  # type: ignore[attr-defined]


def test_the_pattern_docs_are_current() -> None:
    assert (ROOT / "docs" / "patterns.md").read_text() == render(), (
        "docs/patterns.md is stale: run "
        "`python -m coordinator.sagas.patterns.docs --write docs/patterns.md`")


def test_the_public_surface_is_deliberate() -> None:
    import coordinator.sagas.patterns as patterns

    assert patterns.__all__ == [
        "PATTERNS", "ApprovalInput", "EtlBatchInput", "OnboardingInput", "OrderInput",
        "OrderLine", "Pattern", "RefundInput", "approval_saga", "etl_batch_saga",
        "onboarding_saga", "order_saga", "participant_approval_saga", "refund_saga"]
