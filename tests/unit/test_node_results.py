"""One definition of a node's result: what a mapper sees (``ctx.results``) is what a query
(``QueryContext.results``) and the kit's ``results()`` see, for every composite kind."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from coordinator.engine.results import node_results
from coordinator.language.nodes import Choice, ForEach, Parallel, Race
from coordinator.language.saga import Saga, SagaStep
from coordinator.testing import SagaTestEnv
from participant_sdk import HandlerContext, Participant, on_action, on_compensate

COMPOSITES = ("lines", "quote", "both", "route")


class Order(BaseModel):
    skus: list[str]


class Seen(BaseModel):
    values: dict[str, Any]


def _step(name: str, action: str = "do") -> SagaStep:
    return SagaStep(name, "shop", action, compensable=True,
                    payload=lambda ctx: {"sku": ctx.item} if ctx.item is not None else {})


class Composite(Saga):
    name = "composite"
    input_model = Order
    steps = (
        ForEach("lines", lambda ctx: ctx.input.skus, (_step("reserve"),), max_concurrency=2),
        Race("quote", (_step("fast"), _step("slow"))),
        Parallel("both", (_step("left"), _step("right"))),
        Choice("route", ((lambda ctx: len(ctx.input.skus) > 1, _step("express")),),
               otherwise=_step("standard")),
        SagaStep("record", "shop", "record", compensable=False,
                 payload=lambda ctx: {k: ctx.results[k] for k in COMPOSITES}),
    )
    queries = {"seen": lambda q: Seen(values={k: q.results.get(k) for k in COMPOSITES})}


class Shop(Participant):
    name = "shop"

    def __init__(self) -> None:
        self.recorded: dict[str, Any] | None = None

    @on_action("do")
    async def do(self, ctx: HandlerContext, body: dict[str, Any]) -> dict[str, Any]:
        return {"by": ctx.step, **body}

    @on_compensate("do")
    async def undo(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        return None

    @on_action("record")
    async def record(self, ctx: HandlerContext, body: dict[str, Any]) -> None:
        self.recorded = body


async def test_queries_and_the_kit_see_the_composite_results_the_mappers_see() -> None:
    shop = Shop()
    run = await SagaTestEnv(Composite, [shop]).start(Order(skus=["a", "b"]))
    assert await run.run_to_end() == "completed"
    seen_by_mapper = shop.recorded
    assert seen_by_mapper is not None
    assert seen_by_mapper["lines"] == [{"by": "lines[0].reserve", "sku": "a"},
                                       {"by": "lines[1].reserve", "sku": "b"}]
    assert seen_by_mapper["quote"] == {"by": "fast"}
    assert seen_by_mapper["both"] == [{"by": "left"}, {"by": "right"}]
    assert seen_by_mapper["route"] == {"by": "express"}
    results = run.results()
    assert {k: results[k] for k in COMPOSITES} == seen_by_mapper
    assert run.query("seen", Seen).values == seen_by_mapper
    assert node_results(run.sim.definition, run.state) == results
    assert results["lines[1]"] == results["lines[1].reserve"]  # an item: its body's last
    assert "slow" not in results  # the race's loser was undone: it has no result
