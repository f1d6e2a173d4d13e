"""Catch-and-fallback and loops, on the pure engine: what is caught and what is not, undo
first or kept, nested catches, a failing fallback, loops that iterate, hit their cap and are
rolled back in reverse, and both nodes' results."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from coordinator.engine import Status, StepPhase, compile_saga, node_results
from coordinator.engine.machine import node_edges
from coordinator.engine.simulate import Simulator
from coordinator.language import Catch, DefinitionError, Loop, Saga, SagaStep, TccStep
from coordinator.language.policies import RetryPolicy
from participant_sdk.protocol import CommandEnvelope, ErrorKind, Outcome, Phase

ONCE = RetryPolicy(max_attempts=1)


class Inp(BaseModel):
    rounds: int = 3


def tcc(name: str, **kw: Any) -> TccStep:
    return TccStep(name, f"p_{name}", "do", retry=ONCE, **kw)


def act(name: str, **kw: Any) -> SagaStep:
    return SagaStep(name, f"p_{name}", "do", compensable=True, retry=ONCE, **kw)


def saga(*steps: Any) -> Simulator:
    cls = type("FlowSaga", (Saga,), {"name": "flow", "input_model": Inp, "steps": steps})
    sim = Simulator(compile_saga(cls))
    sim.start({"rounds": 3})
    return sim


def run(sim: Simulator, fail: dict[str, tuple[Outcome, ErrorKind]] | None = None,
        deadline: set[str] | None = None) -> list[tuple[str, str]]:
    """Answer every command OK, except the forward phases named in ``fail`` (answered with
    that outcome) and in ``deadline`` (never answered: the deadline timer fires)."""
    fail, deadline = fail or {}, deadline or set()
    sent: list[tuple[str, str]] = []
    for _ in range(500):
        if sim.pending:
            cmd: CommandEnvelope = next(iter(sim.pending.values()))
            sent.append((cmd.step, cmd.phase.value))
            node = cmd.step.rsplit(".", 1)[-1]
            if cmd.phase.is_forward and node in deadline:
                del sim.pending[cmd.message_id]
                sim.fire_next()
            elif cmd.phase.is_forward and node in fail:
                outcome, kind = fail[node]
                sim.reply_to(cmd, outcome, kind=kind)
            else:
                sim.reply_to(cmd, Outcome.OK, result={"by": cmd.step, "payload": cmd.payload})
        elif sim.timers:
            sim.fire_next()
        else:
            return sent
    raise AssertionError("did not settle")


REJECT = (Outcome.REJECTED, ErrorKind.BUSINESS)
BROKEN = (Outcome.FAILED, ErrorKind.TRANSIENT)


def check_moves(sim: Simulator) -> None:
    for decision in sim.decisions:
        for key, node, source, target in decision.moves:
            if key:
                edges = {(a, b) for a, b, _ in node_edges(sim.definition.node(node))}
                assert (source, target) in edges, f"{key}: {source} -> {target}"
    assert sim.replayed().to_json() == sim.current.to_json()


def pay(failures: Any = ("business",), undo: str = "first", fallback: Any = None) -> Catch:
    return Catch("pay", body=(tcc("hold"), tcc("charge")),
                 fallback=fallback or act("invoice", payload=lambda ctx: dict(ctx.caught)),
                 failures=failures, undo=undo)


# -- catch -----------------------------------------------------------------------------------


def test_a_caught_rejection_undoes_the_body_then_runs_the_fallback() -> None:
    sim = saga(tcc("first"), pay(), act("after"))
    sent = run(sim, {"charge": REJECT})
    assert sim.current.status is Status.COMPLETED
    # the body is undone (latest first) before the fallback is sent
    assert sent.index(("charge", "cancel")) < sent.index(("hold", "cancel")) \
        < sent.index(("invoice", "action"))
    assert ("hold", "confirm") not in sent and ("first", "confirm") in sent
    caught = sim.current.steps["pay"].payload
    assert caught is not None and caught["kind"] == "business" and caught["node"] == "charge"
    invoice = sim.current.steps["invoice"].payload
    assert invoice == caught  # the fallback's mapper saw ctx.caught
    results = node_results(sim.definition, sim.current)
    assert results["pay"] == results["invoice"]  # the fallback's result is the node's
    assert any("pay: caught business" in h.note for h in sim.history)
    check_moves(sim)


def test_a_failure_of_a_kind_not_caught_rolls_the_saga_back() -> None:
    sim = saga(tcc("first"), pay(failures=("deadline",)))
    sent = run(sim, {"charge": REJECT})
    assert sim.current.status is Status.COMPENSATED
    assert ("invoice", "action") not in sent and ("first", "cancel") in sent
    assert sim.current.steps["pay"].phase is StepPhase.FAILED
    check_moves(sim)


@pytest.mark.parametrize(("on", "how", "caught"), [
    (("deadline",), "deadline", True),
    (("transient",), "transient", True),
    (("business",), "transient", False),
    ("all", "deadline", True),
    (("timeout", "business"), "deadline", False),
])
def test_kinds(on: Any, how: str, caught: bool) -> None:
    sim = saga(pay(failures=on))
    if how == "deadline":
        run(sim, deadline={"charge"})
    else:
        run(sim, {"charge": BROKEN})
    assert (sim.current.status is Status.COMPLETED) is caught
    assert ("invoice" in node_results(sim.definition, sim.current)) is caught
    if caught:
        assert sim.current.steps["pay"].payload["kind"] == how  # type: ignore[index]


def test_kept_keeps_the_completed_steps_and_confirms_them() -> None:
    sim = saga(pay(undo="kept"))
    sent = run(sim, {"charge": REJECT})
    assert sim.current.status is Status.COMPLETED
    assert ("hold", "cancel") not in sent and ("hold", "confirm") in sent
    assert ("charge", "cancel") in sent  # failed: its effect is unknown, so undone
    assert sim.current.steps["hold"].phase is StepPhase.CONFIRMED
    check_moves(sim)


def test_rollback_later_undoes_the_fallback_then_the_kept_steps() -> None:
    sim = saga(pay(undo="kept"), act("last"))
    sent = run(sim, {"charge": REJECT, "last": REJECT})
    assert sim.current.status is Status.COMPENSATED
    assert sent.index(("invoice", "compensate")) < sent.index(("hold", "cancel"))
    check_moves(sim)


def test_nested_catches_the_innermost_matching_one_wins() -> None:
    inner = Catch("inner", body=tcc("charge"), fallback=act("retry_card"), failures=("business",))
    outer = Catch("outer", body=(tcc("hold"), inner), fallback=act("invoice"), failures="all")
    sim = saga(outer)
    run(sim, {"charge": REJECT})
    results = node_results(sim.definition, sim.current)
    assert sim.current.status is Status.COMPLETED
    assert "retry_card" in results and "invoice" not in results
    assert sim.current.steps["outer"].payload is None  # the outer one caught nothing

    sim = saga(Catch("outer", body=(tcc("hold"), Catch(
        "inner", body=tcc("charge"), fallback=act("retry_card"), failures=("deadline",))),
        fallback=act("invoice", payload=lambda ctx: dict(ctx.caught)), failures="all"))
    run(sim, {"charge": REJECT})  # not the inner one's kind: the outer one catches it
    results = node_results(sim.definition, sim.current)
    assert "invoice" in results and "retry_card" not in results
    assert sim.current.steps["invoice"].payload["node"] == "charge"  # type: ignore[index]
    check_moves(sim)


def test_a_failing_fallback_fails_the_node_and_the_saga_rolls_back() -> None:
    sim = saga(tcc("first"), pay(undo="kept"))
    sent = run(sim, {"charge": REJECT, "invoice": REJECT})
    assert sim.current.status is Status.COMPENSATED
    assert sim.current.steps["pay"].phase is StepPhase.FAILED
    assert ("hold", "cancel") in sent and ("first", "cancel") in sent

    # ... and an outer catch takes the fallback's failure
    sim = saga(Catch("outer", body=pay(), fallback=act("manual"), failures="all"))
    run(sim, {"charge": REJECT, "invoice": REJECT})
    assert sim.current.status is Status.COMPLETED
    assert sim.current.steps["outer"].payload["node"] == "invoice"  # type: ignore[index]
    check_moves(sim)


def test_catch_validation() -> None:
    with pytest.raises(DefinitionError, match="failures is required"):
        saga(Catch("c", body=tcc("a"), fallback=tcc("b")))
    with pytest.raises(DefinitionError, match="unknown failure kind 'oops'"):
        saga(Catch("c", body=tcc("a"), fallback=tcc("b"), failures=("oops",)))
    with pytest.raises(DefinitionError, match="body step 'x' cannot be undone"):
        saga(Catch("c", body=SagaStep("x", "p", "do", compensable=False),
                   fallback=tcc("b"), failures="all"))
    saga(Catch("c", body=SagaStep("x", "p", "do", compensable=False), fallback=tcc("b"),
               failures="all", undo="kept"))
    with pytest.raises(DefinitionError, match="fallback is empty"):
        saga(Catch("c", body=tcc("a"), fallback=(), failures="all"))


# -- loops -----------------------------------------------------------------------------------


def poll(cap: int = 5, until: Any = None) -> Loop:
    return Loop("poll", body=(act("check", payload=lambda ctx: {"i": ctx.index}), tcc("keep")),
                until=until or (lambda ctx: ctx.results["check"]["payload"]["i"] + 1
                                >= ctx.input.rounds),
                max_iterations=cap)


def test_a_loop_runs_until_its_condition_holds() -> None:
    sim = saga(poll())
    sent = run(sim)
    assert sim.current.status is Status.COMPLETED
    checks = [s for s, p in sent if p == "action"]
    assert checks == ["poll[0].check", "poll[1].check", "poll[2].check"]
    assert {s for s, p in sent if p == "confirm"} == {f"poll[{i}].keep" for i in range(3)}
    results = node_results(sim.definition, sim.current)
    assert [r["by"] for r in results["poll"]] == ["poll[0].keep", "poll[1].keep",
                                                  "poll[2].keep"]
    assert results["poll[1].check"]["payload"] == {"i": 1}
    check_moves(sim)


def test_the_cap_fails_the_loop_and_the_rollback_undoes_iterations_in_reverse() -> None:
    sim = saga(tcc("first"), poll(cap=2))
    sent = run(sim)
    assert sim.current.status is Status.COMPENSATED
    assert "max_iterations=2 reached" in (sim.current.reason or "")
    undos = [s for s, p in sent if p in ("cancel", "compensate")]
    assert undos == ["poll[1].keep", "poll[1].check", "poll[0].keep", "poll[0].check",
                     "first"]
    check_moves(sim)


def test_the_cap_is_catchable() -> None:
    sim = saga(Catch("guarded", body=poll(cap=2), fallback=act("give_up"),
                     failures=("max_iterations",), undo="kept"))
    run(sim)
    assert sim.current.status is Status.COMPLETED
    assert sim.current.steps["guarded"].payload["kind"] == "max_iterations"  # type: ignore
    assert sim.current.steps["poll[1].keep"].phase is StepPhase.CONFIRMED


def test_a_failing_iteration_fails_the_loop() -> None:
    sim = saga(poll())
    sent = run(sim, {"check": REJECT})
    assert sim.current.status is Status.COMPENSATED
    assert [s for s, p in sent if p == "action"] == ["poll[0].check"]


def test_until_raising_fails_the_loop_with_the_mapper_kind() -> None:
    sim = saga(Catch("c", body=poll(until=lambda ctx: ctx.results["nope"]),
                     fallback=act("fb"), failures=("mapper",)))
    run(sim)
    assert sim.current.status is Status.COMPLETED
    assert sim.current.steps["c"].payload["kind"] == "mapper"  # type: ignore[index]


def test_loop_validation() -> None:
    with pytest.raises(DefinitionError, match="max_iterations is required"):
        saga(Loop("l", body=tcc("a"), until=lambda ctx: True))
    with pytest.raises(DefinitionError, match="until must be a function"):
        saga(Loop("l", body=tcc("a"), max_iterations=3))
    with pytest.raises(DefinitionError, match="max_iterations must be an int"):
        saga(Loop("l", body=tcc("a"), until=lambda ctx: True, max_iterations=0))


def test_a_sleep_between_iterations_is_durable() -> None:
    sim = saga(Loop("poll", body=(act("check"), _sleep()), until=lambda ctx: ctx.index >= 1,
                    max_iterations=3))
    run(sim)
    assert sim.current.status is Status.COMPLETED
    assert sim.current.steps["poll[1].wait"].phase is StepPhase.SUCCEEDED


def _sleep() -> Any:
    from coordinator.language import Sleep
    return Sleep("wait", timedelta(hours=1))


def test_the_exported_machine_has_the_new_edges() -> None:
    d = compile_saga(type("M", (Saga,), {"name": "m", "input_model": Inp,
                                         "steps": (pay(), poll())}))
    moves = {(t.source, t.target) for t in d.transitions}
    assert ("pay.running", "pay.failed") in moves and ("pay.body.running", "pay.body.failed") \
        in moves and ("pay.fallback.pending", "pay.fallback.running") in moves
    assert ("poll.running", "poll.failed") in moves
    nodes = {n["name"]: n for n in d.to_json()["nodes"]}
    assert nodes["pay"]["failures"] == ["business"] and nodes["pay"]["undo"] == "first"
    assert nodes["poll"]["max_iterations"] == 5
    assert Phase.CANCEL  # the phases the catch sends are the steps' own


def test_an_undo_that_gives_up_while_catching_parks_the_saga_and_a_retry_resumes_it() -> None:
    sim = saga(Catch("pay", body=(tcc("hold", cancel_retry=ONCE), tcc("charge")),
                     fallback=act("invoice"), failures="all"))
    sent: list[tuple[str, str]] = []
    for _ in range(20):  # hold ok, charge rejected, hold's cancel fails for good
        if not sim.pending:
            break
        cmd = next(iter(sim.pending.values()))
        sent.append((cmd.step, cmd.phase.value))
        if (cmd.step, cmd.phase) == ("charge", Phase.TRY):
            sim.reply_to(cmd, *REJECT[:1], kind=REJECT[1])
        elif (cmd.step, cmd.phase) == ("hold", Phase.CANCEL):
            sim.reply_to(cmd, Outcome.REJECTED, kind=ErrorKind.BUSINESS)
        else:
            sim.reply_to(cmd, Outcome.OK)
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "hold"
    assert ("invoice", "action") not in sent
    sim.repair("retry")
    run(sim)
    assert sim.current.status is Status.COMPLETED
    assert "invoice" in node_results(sim.definition, sim.current)
    check_moves(sim)


def test_kept_with_an_uncertain_step_that_cannot_be_undone_parks_the_saga() -> None:
    ship = SagaStep("ship", "p_ship", "do", compensable=False, retry=ONCE)
    sim = saga(Catch("pay", body=ship, fallback=act("invoice"), failures=("deadline",),
                     undo="kept"))
    run(sim, deadline={"ship"})
    assert sim.current.status is Status.DEAD and sim.current.dead_step == "ship"
    assert sim.current.steps["pay"].phase is StepPhase.RUNNING  # not rolled back
    sim.repair("skip", step="ship")  # a person settled it by hand
    run(sim)
    assert sim.current.status is Status.COMPLETED
    assert "invoice" in node_results(sim.definition, sim.current)
    check_moves(sim)


def test_the_drawings_show_the_catch_and_the_loop() -> None:
    from coordinator.sagas.diagram import mermaid
    from coordinator.ui.diagram_svg import state_svg

    d = compile_saga(type("D", (Saga,), {"name": "d", "input_model": Inp,
                                         "steps": (pay(undo="kept"), poll(cap=4))}))
    text = mermaid(d)
    assert 'state "catch pay (on business; failed body kept)" as n_pay {' in text
    assert "n_charge --> n_pay_caught: failed" in text
    assert "n_pay_caught --> n_invoice: body kept" in text
    assert "n_poll_until --> n_check: until false (next iteration)" in text
    assert "n_poll_until --> [*]: until true" in text
    svg = state_svg(d)
    assert "catch pay" in svg and "loop poll" in svg
