"""Timeouts of a whole saga and of composite nodes, on the pure core: wherever the saga is
(a step awaiting its reply, a sleep, a signal wait, a human task, a child saga), what a node's
timeout fails, ``on_timeout="dead"``, a saga that finishes first, replay and the machine."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from coordinator.engine import RepairVerb, Status, StepPhase, TimerKind, compile_saga
from coordinator.engine.compiled import CompiledSaga
from coordinator.engine.decision import InvalidTransition
from coordinator.engine.machine import node_edges
from coordinator.engine.simulate import Simulator
from coordinator.engine.timeouts import timeout_timer_id
from coordinator.language.flow_nodes import Catch, Loop
from coordinator.language.nodes import (
    ChildSaga,
    Choice,
    ForEach,
    Parallel,
    Race,
    Sequence,
    Sleep,
    WaitForSignal,
)
from coordinator.language.saga import DefinitionError, Saga
from coordinator.language.tasks import HumanTask
from coordinator.language.timeouts import human
from participant_sdk.protocol import Outcome, Phase
from tests.unit.test_engine_tree import act, ok, sent, tcc
from tests.unit.tree_support import (
    Run,
    TreeInput,
    check_invariants,
    check_moves,
    check_replay,
    new_run,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
TWO_HOURS = timedelta(hours=2)


def timed(*steps: Any, timeout: timedelta | None = TWO_HOURS, on_timeout: str = "rollback",
          **attrs: Any) -> CompiledSaga:
    """A saga class with its own timeout, compiled."""
    cls = type("Timed", (Saga,), {"name": "timed", "version": 1, "input_model": TreeInput,
                                  "steps": steps, "timeout": timeout,
                                  "on_timeout": on_timeout, **attrs})
    return compile_saga(cls)


def fire_timeout(run: Run, key: str = "") -> None:
    sim = run.sim
    timer = sim.timers[timeout_timer_id(sim.saga_id, key)]
    decision = sim.fire(timer)
    assert decision.ignored is None, decision.ignored


def finish(run: Run) -> None:
    """Participants answer every command in flight; then the usual checks."""
    from tests.unit.tree_support import drain

    drain(run)
    check_invariants(run)
    check_moves(run.sim)
    check_replay(run.sim)


# -- the saga's own timeout, wherever the saga is -----------------------------------------------


def test_the_timer_is_armed_at_the_start_and_counts_from_it() -> None:
    run = new_run(timed(act("a"), act("b")))
    sim = run.sim
    assert sim.current.timeouts == {"": START + TWO_HOURS}
    timer = sim.timers[timeout_timer_id(sim.saga_id, "")]
    assert (timer.kind, timer.due_at, timer.step) == (TimerKind.TIMEOUT, START + TWO_HOURS, "")


def test_timeout_while_a_step_awaits_its_reply_rolls_back_and_undoes_a_late_success() -> None:
    run = new_run(timed(act("a"), act("b")))
    ok(run, "a")
    late = run.sim.last("b")
    fire_timeout(run)
    state = run.sim.current
    assert state.status is Status.COMPENSATING
    assert state.reason == "timed out after 2h in b"
    assert state.steps["b"].abandoned and state.steps["b"].uncertain  # it may have applied
    assert state.timed_out is not None and state.timed_out["node"] == ""
    assert sent(run.sim)[-1] == ("b", "compensate")
    run.world.answer(run.sim, late)  # the reply after the timeout changes nothing
    assert run.sim.current.status is Status.COMPENSATING
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED
    assert ("b", "compensate") in sent(run.sim) and ("a", "compensate") in sent(run.sim)


def test_timeout_in_a_durable_sleep_drops_the_sleep_timer() -> None:
    run = new_run(timed(act("a"), Sleep("nap", timedelta(days=30)), act("b")))
    ok(run, "a")
    sleep_timer = run.sim.current.steps["nap"].timer
    fire_timeout(run)
    state = run.sim.current
    assert state.reason == "timed out after 2h in nap"
    assert sleep_timer not in run.sim.timers
    assert state.steps["nap"].phase is StepPhase.FAILED
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED
    assert sent(run.sim) == [("a", "action"), ("a", "compensate")]


def test_timeout_in_a_signal_wait_names_the_node_path() -> None:
    run = new_run(timed(act("a"), Sequence("fulfil", (WaitForSignal("approve", "go"),))))
    ok(run, "a")
    fire_timeout(run)
    assert run.sim.current.reason == "timed out after 2h in fulfil > approve"
    assert run.sim.current.rollback_reason == run.sim.current.reason
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED
    run.sim.signal("go")  # a signal after the end changes nothing
    assert run.sim.current.status is Status.COMPENSATED


def test_timeout_in_a_human_task_cancels_the_task() -> None:
    run = new_run(timed(act("a"), HumanTask("check", title="Check", users=("u",))))
    ok(run, "a")
    (task_id,) = run.sim.tasks
    fire_timeout(run)
    assert run.sim.current.reason == "timed out after 2h in check"
    assert run.sim.tasks[task_id]["state"] == "cancelled"
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED


def test_timeout_while_a_child_saga_runs_cancels_the_child() -> None:
    run = new_run(timed(act("a"), ChildSaga("ship", "delivery")))
    ok(run, "a")
    assert run.sim.last("ship").phase is Phase.TRY
    fire_timeout(run)
    assert run.sim.current.reason == "timed out after 2h in ship"
    assert run.sim.last("ship").phase is Phase.CANCEL  # the child-saga cancellation path
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED


def test_a_delayed_start_counts_from_its_start_time() -> None:
    sim = Simulator(timed(act("a")), now=START)
    sim.start(TreeInput().model_dump(), start_at=START + timedelta(days=1))
    assert sim.current.timeouts == {}
    sim.fire_next(TimerKind.START)
    assert sim.current.timeouts == {"": START + timedelta(days=1) + TWO_HOURS}


# -- finishing first ------------------------------------------------------------------------


def test_a_saga_that_finishes_first_drops_the_timer_and_a_late_firing_does_nothing() -> None:
    run = new_run(timed(tcc("a"), act("b")))
    tid = timeout_timer_id(run.sim.saga_id, "")
    ok(run, "a")
    ok(run, "b")
    assert run.sim.current.stage.value == "confirm"
    assert tid not in run.sim.timers  # dropped as the forward walk ended
    assert run.sim.current.timeouts == {}
    ok(run, "a", Phase.CONFIRM)
    assert run.sim.current.status is Status.COMPLETED
    assert run.sim.current.timed_out is None
    from coordinator.engine.events import TimerFired

    late = run.sim.apply(TimerFired(timer_id=tid, step="", attempt=1, kind=TimerKind.TIMEOUT))
    assert late.ignored is not None
    assert run.sim.current.status is Status.COMPLETED
    check_replay(run.sim)


def test_a_node_that_finishes_first_drops_its_timer() -> None:
    run = new_run(timed(Sequence("s", (act("a"),), timeout=timedelta(minutes=5)), act("b"),
                        timeout=None))
    tid = timeout_timer_id(run.sim.saga_id, "s")
    assert run.sim.current.timeouts == {"s": START + timedelta(minutes=5)}
    ok(run, "a")
    assert tid not in run.sim.timers and run.sim.current.timeouts == {}
    ok(run, "b")
    assert run.sim.current.status is Status.COMPLETED


# -- a composite's timeout fails that node ---------------------------------------------------


def test_a_composite_timeout_fails_the_node_with_kind_timeout() -> None:
    fulfil = Sequence("fulfil", (act("b"), WaitForSignal("approve", "go")),
                      timeout=timedelta(minutes=30))
    run = new_run(timed(act("a"), fulfil, act("c"), timeout=None))
    ok(run, "a")
    ok(run, "b")
    assert run.sim.current.timeouts == {"fulfil": START + timedelta(minutes=30)}
    fire_timeout(run, "fulfil")
    state = run.sim.current
    node = state.steps["fulfil"]
    assert node.phase is StepPhase.FAILED
    assert node.last_error is not None and node.last_error.kind == "timeout"
    assert state.reason == "timed out after 30m in fulfil (at fulfil > approve)"
    assert state.cause == "fulfil"
    finish(run)
    assert sent(run.sim)[-2:] == [("b", "compensate"), ("a", "compensate")]


def test_a_timed_out_race_branch_fails_only_that_branch() -> None:
    slow = Sequence("slow", (act("s1"), act("s2")), timeout=timedelta(minutes=1))
    run = new_run(timed(Race("r", (slow, act("fast")), quorum=1), act("after"), timeout=None))
    ok(run, "s1")
    fire_timeout(run, "slow")  # s2 in flight: the branch fails, the race goes on
    state = run.sim.current
    assert state.status is Status.RUNNING
    assert state.steps["slow"].phase is StepPhase.FAILED
    assert state.steps["r"].phase is StepPhase.RUNNING
    ok(run, "fast")
    assert ("after", "action") in sent(run.sim)
    finish(run)
    assert run.sim.current.status is Status.COMPLETED
    assert ("s1", "compensate") in sent(run.sim)  # the timed-out branch was undone


@pytest.mark.parametrize("make", [
    lambda t: Parallel("n", (act("x"), act("y")), timeout=t),
    lambda t: ForEach("n", items=lambda ctx: [1, 2], body=(act("x"),), timeout=t),
    lambda t: Choice("n", ((lambda ctx: True, act("x")),), timeout=t),
    lambda t: Race("n", (act("x"), act("y")), quorum=2, timeout=t),
    lambda t: Catch("n", (act("x"),), (act("y"),), failures=("business",), timeout=t),
    lambda t: Loop("n", (act("x"),), until=lambda ctx: False, max_iterations=5, timeout=t),
])
def test_every_composite_kind_times_out(make: Any) -> None:
    run = new_run(timed(act("a"), make(timedelta(seconds=90)), timeout=None))
    ok(run, "a")
    fire_timeout(run, "n")
    assert run.sim.current.reason is not None
    assert run.sim.current.reason.startswith("timed out after 1m30s in n")
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED


def test_a_catch_takes_a_composite_timeout_inside_it_as_kind_timeout() -> None:
    fulfil = Sequence("fulfil", (act("b"), WaitForSignal("approve", "go")),
                      timeout=timedelta(minutes=30))
    guarded = Catch("guard", (fulfil,), (act("manual"),), failures=("timeout",))
    run = new_run(timed(act("a"), guarded, act("c"), timeout=None))
    ok(run, "a")
    ok(run, "b")
    fire_timeout(run, "fulfil")
    state = run.sim.current
    assert state.status is Status.RUNNING  # caught: the fallback runs instead
    assert state.steps["guard"].payload is not None
    assert state.steps["guard"].payload["kind"] == "timeout"
    assert sent(run.sim)[-1] == ("b", "compensate")  # the body undone first, then
    finish(run)
    assert run.sim.current.status is Status.COMPLETED
    done = sent(run.sim)
    assert done.index(("b", "compensate")) < done.index(("manual", "action"))  # the fallback


def test_a_catch_of_other_kinds_lets_a_composite_timeout_roll_the_saga_back() -> None:
    fulfil = Sequence("fulfil", (WaitForSignal("approve", "go"),), timeout=timedelta(minutes=5))
    guarded = Catch("guard", (fulfil,), (act("manual"),), failures=("business",))
    run = new_run(timed(act("a"), guarded, timeout=None))
    ok(run, "a")
    fire_timeout(run, "fulfil")
    assert run.sim.current.status is Status.COMPENSATING
    finish(run)
    assert ("manual", "action") not in sent(run.sim)


def test_a_child_saga_node_timeout_fails_the_node_and_cancels_the_child() -> None:
    run = new_run(timed(act("a"), ChildSaga("ship", "delivery", timeout=timedelta(hours=1)),
                        timeout=None))
    ok(run, "a")
    fire_timeout(run, "ship")
    ship = run.sim.current.steps["ship"]
    assert ship.phase is StepPhase.CANCELLING and ship.uncertain  # failed, then undone
    assert run.sim.current.cause == "ship"
    assert ship.last_error is not None and ship.last_error.kind == "timeout"
    assert run.sim.last("ship").phase is Phase.CANCEL
    finish(run)


def test_a_node_in_a_failed_branch_does_not_time_out_later() -> None:
    inner = Sequence("inner", (act("b"),), timeout=timedelta(hours=5))
    run = new_run(timed(Parallel("p", (inner, act("c"))), timeout=None))
    assert set(run.sim.current.timeouts) == {"inner"}
    run.world.answer(run.sim, run.sim.last("c"), Outcome.REJECTED)
    assert run.sim.current.timeouts == {}  # the rollback dropped it
    finish(run)


# -- on_timeout="dead" ------------------------------------------------------------------------


def test_on_timeout_dead_parks_the_saga_and_compensate_rolls_it_back() -> None:
    run = new_run(timed(act("a"), act("b"), WaitForSignal("w", "go"), on_timeout="dead"))
    ok(run, "a")
    fire_timeout(run)
    state = run.sim.current
    assert state.status is Status.DEAD and state.dead_step is None
    assert state.dead_reason == "timed out after 2h in b"
    assert state.steps["b"].phase is StepPhase.FAILED  # nothing runs on while dead
    for verb in (RepairVerb.RETRY, RepairVerb.SKIP):
        with pytest.raises(InvalidTransition, match="compensate rolls it back"):
            run.sim.repair(verb)
    run.sim.repair(RepairVerb.COMPENSATE)
    assert run.sim.current.status is Status.COMPENSATING
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED


def test_a_node_timeout_dead_parks_the_saga_and_cuts_its_waits() -> None:
    gate = Sequence("gate", (WaitForSignal("w", "go"),), timeout=timedelta(hours=1),
                    on_timeout="dead")
    run = new_run(timed(act("a"), gate, timeout=None))
    ok(run, "a")
    fire_timeout(run, "gate")
    state = run.sim.current
    assert state.status is Status.DEAD
    assert state.reason == "timed out after 1h in gate (at gate > w)"
    assert state.steps["w"].phase is StepPhase.FAILED and state.steps["w"].timer is None
    run.sim.repair(RepairVerb.RESOLVE, payload={"status": "compensated"})
    assert run.sim.current.status is Status.COMPENSATED
    check_moves(run.sim)
    check_replay(run.sim)


# -- definitions and the machine --------------------------------------------------------------


def test_bad_timeouts_are_definition_errors_naming_the_place() -> None:
    with pytest.raises(DefinitionError, match=r"Timed: timeout must be None or a positive"):
        timed(act("a"), timeout=timedelta(0))
    with pytest.raises(DefinitionError, match=r"Timed: on_timeout must be 'rollback' or 'dead'"):
        timed(act("a"), on_timeout="fail")
    with pytest.raises(DefinitionError, match=r"Timed.s: on_timeout must be 'fail' or 'dead'"):
        timed(Sequence("s", (act("a"),), timeout=TWO_HOURS, on_timeout="rollback"))  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match=r"Timed.c: timeout must be None or a positive"):
        timed(ChildSaga("c", "other", timeout=3600))  # type: ignore[arg-type]


def test_the_machine_and_the_export_show_the_timeouts() -> None:
    definition = timed(Sequence("s", (act("a"),), timeout=timedelta(minutes=30)),
                       ChildSaga("c", "other", timeout=TWO_HOURS))
    assert ("running", "failed", "timed out after 30m") in node_edges(definition.node("s"))
    assert ("trying", "failed", "timed out after 2h") in node_edges(definition.node("c"))
    export = definition.to_json()
    assert export["timeout_s"] == 7200 and export["on_timeout"] == "rollback"
    assert export["nodes"][0]["timeout_s"] == 1800
    assert {"from": "running", "to": "compensating",
            "on": "timed out after 2h (rollback)"} in export["transitions"]
    assert "timeout_s" not in timed(act("a"), timeout=None).to_json()


def test_durations_read_as_people_write_them() -> None:
    assert [human(timedelta(seconds=s)) for s in (0.5, 45, 90, 7200, 93_600)] == \
        ["0.5s", "45s", "1m30s", "2h", "1d2h"]


def test_the_diagram_shows_the_saga_and_node_timeouts() -> None:
    from coordinator.sagas.diagram import mermaid

    text = mermaid(timed(act("a"), Sequence("s", (act("b"),), timeout=timedelta(minutes=30),
                                            on_timeout="dead"), on_timeout="rollback"))
    assert 'state "sequence s (timeout 30m: dead)" as n_s {' in text
    assert "    n_a --> n_compensating: saga timed out after 2h" in text
    assert "    n_s --> n_dead: timed out after 30m" in text
    assert "timed out" not in mermaid(timed(act("a"), timeout=None))


# -- the docs -------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _section(page: str, title: str) -> str:
    return (DOCS / page).read_text().split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]


def test_the_language_page_draws_what_the_coordinator_draws_right_after_time() -> None:
    from coordinator.sagas.diagram import mermaid

    text = (DOCS / "saga-language.md").read_text()
    assert text.index("### Timeouts") > text.index("### Time in mappers and guards")
    assert "\n### " not in text.split("### Time in mappers and guards", 1)[1].split(
        "### Timeouts", 1)[0]  # right after it
    section = _section("saga-language.md", "Timeouts")
    code = re.search(r"```python\n(.*?)```", section, re.S)
    drawn = re.search(r"```mermaid\n(.*?)\n```", section, re.S)
    assert code is not None and drawn is not None
    namespace: dict[str, Any] = {}
    exec("from datetime import timedelta\nfrom pydantic import BaseModel\n"
         "from coordinator.language import Saga, SagaStep, WaitForSignal\n"
         + code.group(1).split("env = SagaTestEnv", 1)[0], namespace)
    assert drawn.group(1) == mermaid(compile_saga(namespace["HeldOrder"])).rstrip("\n")


def test_the_declarative_page_yaml_loads_with_its_timeouts() -> None:
    from coordinator.definitions import load_saga

    yaml_block = re.search(r"```yaml\n(.*?)```", _section("declarative-sagas.md", "Timeouts"),
                           re.S)
    assert yaml_block is not None
    compiled = compile_saga(load_saga(yaml_block.group(1)))
    assert compiled.timeout == TWO_HOURS
    assert compiled.node("fulfil").timeout == timedelta(minutes=30)  # type: ignore[union-attr]


def test_a_migration_that_renames_a_timed_node_moves_its_timeout() -> None:
    from coordinator.engine.events import Migrated
    from coordinator.language.saga import Migration

    class V1(Saga):
        name = "timed_mig"
        input_model = TreeInput
        steps = (Sequence("s", (act("a"),), timeout=timedelta(minutes=10)),)

    class V2(Saga):
        name = "timed_mig"
        version = 2
        input_model = TreeInput
        steps = (Sequence("t", (act("a"),), timeout=timedelta(minutes=10)),)
        migrate_from = {1: Migration(V1, renames={"s": "t"})}

    run = new_run(compile_saga(V1))
    run.sim.definition = compile_saga(V2)
    run.sim.apply(Migrated(from_version=1, to_version=2, migration="v1->v2", actor="ops"))
    assert run.sim.current.timeouts == {"t": START + timedelta(minutes=10)}
    assert set(run.sim.timers) == {timeout_timer_id(run.sim.saga_id, "t"),
                                   *(t for t in run.sim.timers if ":a:" in t)}
    fire_timeout(run, "t")
    assert run.sim.current.reason == "timed out after 10m in t (at t > a)"
    assert run.sim.replayed().to_json() == run.sim.current.to_json()


def test_each_for_each_item_has_its_own_timer_and_one_timing_out_fails_the_for_each() -> None:
    body = (Sequence("pack", (act("box"),), timeout=timedelta(minutes=5)),)
    run = new_run(timed(ForEach("lines", items=lambda ctx: [1, 2], body=body), timeout=None))
    assert set(run.sim.current.timeouts) == {"lines[0].pack", "lines[1].pack"}
    ok(run, "lines[0].box")
    assert set(run.sim.current.timeouts) == {"lines[1].pack"}  # item 0 finished first
    fire_timeout(run, "lines[1].pack")
    assert run.sim.current.reason == \
        "timed out after 5m in lines[1] > pack (at lines[1] > pack > box)"
    finish(run)
    assert run.sim.current.status is Status.COMPENSATED
    assert ("lines[0].box", "compensate") in sent(run.sim)
