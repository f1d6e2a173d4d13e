"""Every node kind the language has, declared in a class with expression mappers, exports
to the format and loads back to the same tree; the YAML form runs in the test kit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from coordinator.definitions import compile_expression as expr
from coordinator.definitions import export, load_saga, to_yaml
from coordinator.engine.compiled import compile_saga
from coordinator.language import (
    Catch,
    ChildSaga,
    Choice,
    ForEach,
    Loop,
    Parallel,
    Patched,
    Race,
    Saga,
    SagaStep,
    Sequence,
    Sleep,
    SleepUntil,
    TccStep,
    WaitForSignal,
)
from coordinator.language.calendars import BusinessCalendar
from coordinator.language.tasks import Escalation, HumanTask
from coordinator.sagas.diagram import mermaid
from coordinator.testing import SagaTestEnv
from tests.unit.definitions.test_running import recording


class Input(BaseModel):
    id: str = Field(min_length=1, max_length=50, pattern="^[a-z0-9-]+$")
    amount: float = Field(ge=0, le=1e6)
    express: bool = False
    tags: list[str] = Field(default_factory=list, max_length=5)
    note: str | None = None
    manager: str = "ann"


class Go(BaseModel):
    ok: bool


class Decision(BaseModel):
    outcome: Literal["yes", "no", "later"]
    why: str = ""


class EveryKind(Saga):
    name = "every_kind"
    version = 3
    description = "one of each"
    input_model = Input
    queries = {"summary": expr("{id: input.id, status: status}")}
    steps = (
        TccStep("hold", "payments", "charge", payload=expr("{amount: input.amount}", "object"),
                finish_payload=expr("{amount: input.amount, final: `true`}", "object"),
                when=expr("input.amount > `0`", "bool"), confirm_retry={"max_attempts": 9},
                cancel_retry={"max_attempts": 8, "non_retryable": ["unexpected"]},
                rollback_deadline=timedelta(seconds=45), description="the money"),
        Sequence("prepare", (
            SagaStep("label", "shipping", "ship", compensable=True,
                     compensation_payload=expr("{undo: input.id}", "object"),
                     compensation_retry={"max_attempts": 7}),
            Sleep("cool_down", timedelta(minutes=5)),
            Sleep("computed_nap", expr("`60`", "duration")),
        )),
        Choice("route", branches=(
            (expr("input.express", "bool"), SagaStep("fast", "shipping", "ship",
                                                     compensable=False)),
        ), otherwise=(SagaStep("slow", "shipping", "ship", compensable=True),
                      SleepUntil("until_fixed", datetime(2026, 1, 2, tzinfo=UTC)))),
        Patched("add-audit", new=SagaStep("audit", "shipping", "ship", compensable=True),
                name="audit_guard"),
        Patched("swap-notify", new=(SagaStep("notify2", "shipping", "ship", compensable=True),),
                old=(SagaStep("notify", "shipping", "ship", compensable=True),)),
        Parallel("both", (SagaStep("p1", "shipping", "ship", compensable=True),
                          (SagaStep("p2", "shipping", "ship", compensable=True),
                           SagaStep("p3", "shipping", "ship", compensable=True)))),
        Race("quick", (SagaStep("r1", "shipping", "ship", compensable=True),
                       SagaStep("r2", "shipping", "ship", compensable=True),
                       SagaStep("r3", "shipping", "ship", compensable=True)), quorum=2),
        ForEach("each_tag", items=expr("input.tags", "list"), max_concurrency=2, max_items=5,
                body=(SagaStep("tag", "shipping", "ship", compensable=True,
                               payload=expr("{tag: item, at: index}", "object")),)),
        WaitForSignal("go", "go", payload=Go, timeout=timedelta(days=2),
                      on_timeout="continue"),
        SleepUntil("until_expr", expr("'2026-01-03T00:00:00Z'", "datetime")),
        HumanTask("decide", title=expr("join('', ['Decide ', input.id])", "text"),
                  description="a person decides", form=Decision, reject=("no",),
                  users=expr("[input.manager]", "names"), groups=("finance",),
                  priority=70, due=timedelta(days=1),
                  calendar=BusinessCalendar(weekend=(5, 6)), timezone="Europe/Berlin",
                  remind_after=timedelta(hours=4), remind_every=timedelta(hours=8),
                  max_reminders=2, escalations=(Escalation(timedelta(days=2),
                                                           to_groups=("leads",), priority=90),),
                  timeout=timedelta(days=5), on_timeout=Decision(outcome="later"),
                  four_eyes=True, chain="approvals"),
        Catch("rescue", body=(SagaStep("risky", "shipping", "ship", compensable=True),),
              fallback=SagaStep("plan_b", "shipping", "ship", compensable=True,
                                payload=expr("{why: caught.reason}", "object")),
              failures=("business", "deadline"), undo="kept", description="or else"),
        Catch("anything", body=SagaStep("risky2", "shipping", "ship", compensable=True),
              fallback=(SagaStep("plan_c", "shipping", "ship", compensable=True),), failures="all",
              timeout=timedelta(hours=1)),
        Loop("again", body=SagaStep("poll", "shipping", "ship", compensable=True),
             until=expr("results.poll.done", "bool"), max_iterations=7,
             timeout=timedelta(days=1), on_timeout="dead"),
        ChildSaga("sub", "order", input=expr("{order_id: input.id}", "object"),
                  when=expr("!input.express", "bool"), version=2,
                  deadline=timedelta(minutes=30), finish_retry={"max_attempts": 4}),
    )


def test_every_kind_exports_and_loads_back_to_the_same_tree() -> None:
    definition = export(EveryKind)  # no table: every mapper is an expression already
    text = to_yaml(definition)
    for kind in ("tcc", "saga", "sequence", "parallel", "race", "foreach", "choice", "patched",
                 "child", "sleep", "sleep_until", "wait", "task", "catch", "loop"):
        assert f"kind: {kind}\n" in text, kind
    loaded = load_saga(text)
    assert compile_saga(loaded).to_json() == compile_saga(EveryKind).to_json()
    assert mermaid(compile_saga(loaded)) == mermaid(compile_saga(EveryKind))
    assert export(loaded) == definition
    task = next(n for n in loaded.steps if isinstance(n, HumanTask))
    original = next(n for n in EveryKind.steps if isinstance(n, HumanTask))
    assert (task.escalations, task.calendar, task.on_timeout.model_dump()) == (
        original.escalations, original.calendar, original.on_timeout.model_dump())


WAITS = """
name: waits
version: 1
input: {type: object, properties: {express: {type: boolean}}}
steps:
  - {kind: saga, name: first, participant: shipping, action: ship, compensable: true}
  - {kind: sleep, name: nap, duration: P30D}
  - kind: wait
    name: go
    signal: go
    payload: {type: object, properties: {ok: {type: boolean}}, required: [ok]}
  - kind: choice
    name: pick
    branches:
      - when: results.go.ok
        steps:
          - {kind: saga, name: accepted, participant: shipping, action: ship, compensable: true}
    otherwise:
      - {kind: saga, name: declined, participant: shipping, action: ship, compensable: true}
"""


async def test_a_yaml_saga_sleeps_waits_for_a_signal_and_chooses_in_the_kit() -> None:
    log: list[Any] = []
    env = SagaTestEnv(load_saga(WAITS), [recording("shipping", "ship", False, log)])
    run = await env.start({"express": False})
    await run.run_until_idle()
    assert await run.skip(timedelta(days=31))
    await run.signal("go", {"ok": False})
    await run.run_to_end()
    assert run.status == "completed"
    assert [step for _, _, step, _ in log] == ["first", "declined"]
