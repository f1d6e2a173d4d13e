"""The compiled state machine: JSON export, Mermaid drawing and the diagram CLI function."""

from __future__ import annotations

import io
import json

import pytest

from coordinator.diagram import main_diagram, mermaid
from coordinator.engine import compile_saga
from coordinator.engine.simulate import Simulator
from examples.order_saga import OrderSaga
from tests.unit.test_engine_fixtures import ORDER_INPUT, Guarded, WithPivot, compiled

ORDER = compile_saga(OrderSaga)


def test_state_names_follow_the_scheme() -> None:
    assert ORDER.states == (
        "start", "reserve_funds.trying", "reserve_stock.trying", "create_shipment.executing",
        "confirming", "reserve_funds.cancelling", "reserve_stock.cancelling",
        "create_shipment.compensating",
        "completed", "compensated", "cancelled", "dead",
    )


def test_json_export_is_json_and_complete() -> None:
    data = json.loads(json.dumps(ORDER.to_json()))
    assert (data["name"], data["version"], data["initial"]) == ("order", 1, "start")
    assert data["input_schema"]["properties"]["amount_cents"]["type"] == "integer"
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["create_shipment"]["compensation"] == "cancel_shipment"
    assert steps["reserve_funds"]["kind"] == "tcc"
    assert steps["reserve_funds"]["retry"]["max_attempts"] == 5
    edges = {(t["from"], t["to"]) for t in data["transitions"]}
    assert ("create_shipment.executing", "confirming") in edges
    assert ("confirming", "completed") in edges and ("confirming", "dead") in edges
    assert not any(a.endswith(".confirming") or b.endswith(".confirming") for a, b in edges)
    assert ("create_shipment.compensating", "reserve_stock.cancelling") in edges
    assert ("reserve_funds.cancelling", "compensated") in edges
    states = set(data["states"])
    assert all(a in states and b in states for a, b in edges)


def test_every_state_is_reachable_from_start() -> None:
    for definition in (ORDER, compiled(WithPivot), compiled(Guarded)):
        reach, frontier = {"start"}, ["start"]
        while frontier:
            here = frontier.pop()
            for t in definition.transitions:
                if t.source == here and t.target not in reach:
                    reach.add(t.target)
                    frontier.append(t.target)
        assert reach == set(definition.states), definition.name


def test_guarded_step_is_bypassed_and_pivot_leads_to_dead() -> None:
    guarded = compiled(Guarded)
    labels = {(t.source, t.target): t.label for t in guarded.transitions}
    assert "ship skipped" in labels[("first.executing", "last.trying")]
    pivot = compiled(WithPivot)
    assert any(t.source == "c.compensating" and t.target == "dead" and "cannot be undone"
               in t.label for t in pivot.transitions)


def test_mermaid_draws_every_transition_and_highlights_current_state() -> None:
    text = mermaid(ORDER, current_state="reserve_stock.trying")
    assert text.startswith("stateDiagram-v2\n")
    assert 's_reserve_funds_trying --> s_reserve_stock_trying: ok' in text
    assert "class s_reserve_stock_trying current" in text
    assert text.count("-->") == len(ORDER.transitions) + 1 + 3  # + [*] start, 3 ends
    with pytest.raises(ValueError, match="not a state"):
        mermaid(ORDER, current_state="nope")


def test_running_saga_state_is_a_machine_state() -> None:
    sim = Simulator(ORDER)
    sim.start(ORDER_INPUT)
    seen = []
    while not sim.current.status.is_terminal:
        assert sim.current.machine_state() in ORDER.states
        seen.append(sim.current.machine_state())
        sim.reply_to(next(iter(sim.pending.values())))
    assert seen == ["reserve_funds.trying", "reserve_stock.trying", "create_shipment.executing",
                    "confirming", "confirming"]
    assert sim.current.machine_state() == "completed"
    mermaid(ORDER, sim.current.machine_state())


def test_confirming_is_one_state_for_all_tcc_steps() -> None:
    labels = {(t.source, t.target): t.label for t in ORDER.transitions}
    assert labels[("confirming", "completed")] == "all confirmed [reserve_funds, reserve_stock]"
    assert [t.source for t in ORDER.transitions].count("confirming") == 2
    guarded = compiled(Guarded)  # the guarded step before the only TCC step may be skipped
    assert ("first.executing", "last.trying") in {(t.source, t.target)
                                                  for t in guarded.transitions}
    assert "confirming" in guarded.states


def test_main_diagram_prints_mermaid_or_json() -> None:
    out = io.StringIO()
    assert main_diagram(["examples.order_saga:OrderSaga"], out=out) == 0
    assert out.getvalue().startswith("stateDiagram-v2")
    out = io.StringIO()
    assert main_diagram(["examples.order_saga:OrderSaga", "--json"], out=out) == 0
    assert json.loads(out.getvalue())["name"] == "order"


def test_main_diagram_reports_bad_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_diagram(["examples.order_saga:Nope"]) == 2
    assert main_diagram(["no_colon"]) == 2
    assert "error:" in capsys.readouterr().err
