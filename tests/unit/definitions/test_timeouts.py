"""Timeouts in the declarative format: a saga's own and a node's, read from YAML into the same
compiled tree as the class, exported back as written, and refused with their path when bad."""

from __future__ import annotations

from datetime import timedelta

import pytest

from coordinator.definitions import InvalidDefinition, export, load_saga, to_yaml
from coordinator.engine.compiled import compile_saga
from coordinator.sagas.diagram import mermaid
from coordinator.testing import SagaTestEnv
from participant_sdk import HandlerContext, Participant, on_action, on_compensate

YAML = """
name: held_order
version: 1
input:
  type: object
  properties:
    order_id: {type: string}
  required: [order_id]
timeout: PT2H
steps:
  - kind: saga
    name: hold
    participant: stock
    action: hold
    compensable: true
  - kind: sequence
    name: fulfil
    timeout: PT30M
    on_timeout: dead
    steps:
      - {kind: wait, name: approve, signal: approved}
"""


def test_a_yaml_timeout_compiles_to_the_classes_timeouts_and_exports_back() -> None:
    cls = load_saga(YAML)
    assert cls.timeout == timedelta(hours=2) and cls.on_timeout == "rollback"
    compiled = compile_saga(cls)
    fulfil = compiled.node("fulfil")
    assert (fulfil.timeout, fulfil.on_timeout) == (timedelta(minutes=30), "dead")  # type: ignore[union-attr]
    assert compiled.to_json()["timeout_s"] == 7200
    again = load_saga(to_yaml(export(cls)))
    assert compile_saga(again).to_json() == compiled.to_json()
    assert mermaid(compile_saga(again)) == mermaid(compiled)
    text = to_yaml(export(cls))
    assert "timeout: PT2H" in text and "on_timeout: dead" in text
    assert "on_timeout: rollback" not in text  # defaults stay out, as written


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("timeout: PT2H\n", "timeout: PT2H\non_timeout: fail\n", r"on_timeout.*'rollback'"),
    ("timeout: PT30M", "timeout: PT0S", r"fulfil.*timeout must be None or a positive"),
    ("on_timeout: dead", "on_timeout: continue", r"on_timeout.*'fail'"),
])
def test_bad_timeouts_are_refused_with_their_place(old: str, new: str, problem: str) -> None:
    with pytest.raises(InvalidDefinition, match=problem):
        load_saga(YAML.replace(old, new))


class Stock(Participant):
    name = "stock"

    @on_action("hold")
    async def hold(self, ctx: HandlerContext, body: dict[str, str]) -> None:
        await ctx.conn.insert("ledger", {"what": "hold"})

    @on_compensate("hold")
    async def release(self, ctx: HandlerContext, body: dict[str, str]) -> None:
        await ctx.conn.insert("ledger", {"what": "release"})


async def test_a_declared_saga_times_out_in_the_kit() -> None:
    env = SagaTestEnv(load_saga(YAML.replace("on_timeout: dead", "on_timeout: fail")),
                      [Stock()])
    run = await env.start({"order_id": "o-1"})
    await run.skip(timedelta(minutes=30))
    assert run.status == "compensated"
    assert run.state.reason == "timed out after 30m in fulfil (at fulfil > approve)"
    assert [r["what"] for r in env.harnesses["stock"].tables["ledger"]] == ["hold", "release"]
