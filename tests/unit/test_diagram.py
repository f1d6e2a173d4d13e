"""The compiled state machine: JSON export, Mermaid drawing and the diagram CLI function."""

from __future__ import annotations

import io
import json

import pytest

from coordinator.engine import compile_saga
from coordinator.engine.simulate import Simulator
from coordinator.sagas.diagram import main_diagram, mermaid
from examples.order_saga import OrderSaga
from tests.unit.test_engine_fixtures import ORDER_INPUT, WithPivot, compiled

ORDER = compile_saga(OrderSaga)


def test_states_are_each_nodes_phases_plus_the_sagas_own() -> None:
    states = set(ORDER.states)
    for name in ("reserve_funds.trying", "reserve_funds.tried", "reserve_funds.confirming",
                 "reserve_funds.cancelling", "create_shipment.executing",
                 "create_shipment.compensating", "start", "running", "compensating",
                 "completed", "compensated", "cancelled", "dead"):
        assert name in states
    assert "create_shipment.confirming" not in states  # a saga step has no confirm phase


def test_json_export_is_json_and_complete() -> None:
    data = json.loads(json.dumps(ORDER.to_json()))
    assert (data["name"], data["version"], data["initial"]) == ("order", 1, "start")
    assert data["input_schema"]["properties"]["amount_cents"]["type"] == "integer"
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["create_shipment"]["reversible"] is True
    assert steps["reserve_funds"]["kind"] == "tcc"
    assert steps["reserve_funds"]["retry"]["max_attempts"] == 5
    assert [n["name"] for n in data["nodes"]] == ["reserve_funds", "reserve_stock",
                                                  "create_shipment"]
    edges = {(t["from"], t["to"]) for t in data["transitions"]}
    assert ("reserve_funds.tried", "reserve_funds.confirming") in edges
    assert ("create_shipment.succeeded", "create_shipment.compensating") in edges
    assert ("running", "completed") in edges and ("dead", "compensating") in edges
    states = set(data["states"])
    assert all(a in states and b in states for a, b in edges)


def test_an_irreversible_step_has_no_undo_edge() -> None:
    pivot = {(t.source, t.target) for t in compiled(WithPivot).transitions}
    assert ("pivot.succeeded", "pivot.compensating") not in pivot
    assert ("pivot.failed", "pivot.executing") in pivot  # operator retry, outcome unknown
    assert ("c.succeeded", "c.compensating") in pivot


def test_mermaid_draws_the_tree_and_highlights_current_states() -> None:
    text = mermaid(ORDER, "reserve_stock.trying")
    assert text.startswith("stateDiagram-v2\n")
    assert "n_reserve_funds --> n_reserve_stock" in text
    assert "n_create_shipment --> n_confirming: all succeeded" in text
    assert "class n_reserve_stock current" in text
    with pytest.raises(ValueError, match="not a state"):
        mermaid(ORDER, "nope")


def test_running_saga_states_are_machine_states() -> None:
    sim = Simulator(ORDER)
    sim.start(ORDER_INPUT)
    seen = []
    while not sim.current.status.is_terminal:
        assert set(sim.current.machine_states()) <= set(ORDER.states)
        seen.append(sim.current.machine_states())
        sim.reply_to(next(iter(sim.pending.values())))
    assert seen == [["reserve_funds.trying"], ["reserve_stock.trying"],
                    ["create_shipment.executing"],
                    ["reserve_funds.confirming", "reserve_stock.confirming"],
                    ["reserve_stock.confirming"]]
    assert sim.current.machine_states() == ["completed"]
    mermaid(ORDER, sim.current.machine_states())


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
