"""Catch and loops in the test kit (``coordinator.testing``), against real handlers: a
declined card caught and invoiced instead, a shipment polled with a day's sleep between
tries, the same saga written in YAML, and a loop's iterations rolled back in reverse."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from coordinator.definitions import compile_expression as expr
from coordinator.definitions import export, load_saga, to_yaml
from coordinator.engine.compiled import compile_saga
from coordinator.language import Catch, Loop, Saga, SagaStep, Sleep, TccStep
from coordinator.testing import SagaTestEnv
from participant_sdk import (
    BusinessRejection,
    HandlerContext,
    Participant,
    on_action,
    on_cancel,
    on_compensate,
    on_confirm,
    on_try,
)

DECLARATIVE_PAGE = (Path(__file__).resolve().parents[2] / "docs" /
                    "declarative-sagas.md").read_text()


class Order(BaseModel):
    customer: str
    polls: int = 3


class Body(BaseModel):
    model_config = {"extra": "allow"}


class Shop(Participant):
    """Payments, billing and the carrier in one: records what it is asked, in order."""

    name = "shop"

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, str]] = []

    @on_try("charge")
    async def charge(self, ctx: HandlerContext, body: Body) -> dict[str, Any]:
        self.log.append(("charge", ctx.step))
        if body.model_dump().get("customer") == "broke":
            raise BusinessRejection("card declined")
        return {"charged": True}

    @on_confirm("charge")
    async def charged(self, ctx: HandlerContext, body: Body) -> None:
        self.log.append(("confirm", ctx.step))

    @on_cancel("charge")
    async def uncharge(self, ctx: HandlerContext, body: Body) -> None:
        self.log.append(("cancel", ctx.step))

    @on_action("invoice")
    async def invoice(self, ctx: HandlerContext, body: Body) -> dict[str, Any]:
        self.log.append(("invoice", ctx.step))
        return {"invoiced": body.model_dump()}

    @on_compensate("invoice")
    async def void(self, ctx: HandlerContext, body: Body) -> None:
        self.log.append(("void", ctx.step))

    @on_action("track")
    async def track(self, ctx: HandlerContext, body: Body) -> dict[str, Any]:
        self.log.append(("track", ctx.step))
        return {"delivered": body.model_dump()["i"] + 1 >= body.model_dump()["polls"]}

    @on_compensate("track")
    async def untrack(self, ctx: HandlerContext, body: Body) -> None:
        self.log.append(("untrack", ctx.step))


class Checkout(Saga):
    name = "flow_checkout"
    input_model = Order
    steps = (
        Catch("pay",
              body=TccStep("card", "shop", "charge",
                           payload=expr("{customer: input.customer}", "object")),
              fallback=SagaStep("bill", "shop", "invoice", compensable=True,
                                payload=expr("{why: caught.kind, customer: input.customer}",
                                             "object")),
              failures=("business",)),
        Loop("delivery", body=(
            SagaStep("poll", "shop", "track", compensable=True,
                     payload=expr("{i: index, polls: input.polls}", "object")),
            Sleep("wait_a_day", timedelta(days=1))),
            until=expr("results.poll.delivered", "bool"), max_iterations=4),
    )


async def test_a_caught_rejection_is_invoiced_and_the_loop_polls_until_delivered() -> None:
    shop = Shop()
    run = await SagaTestEnv(Checkout, [shop]).start({"customer": "broke"})
    assert await run.run_to_end() == "completed"
    # the declined try's cancel is a null compensation: the barrier answers it
    assert shop.log == [("charge", "card"), ("invoice", "bill"),
                        ("track", "delivery[0].poll"), ("track", "delivery[1].poll"),
                        ("track", "delivery[2].poll")]
    assert run.results()["pay"] == {"invoiced": {"why": "business", "customer": "broke"}}
    assert [r for r in run.results()["delivery"]] == [None, None, None]  # each ends in a sleep
    assert run.results()["delivery[2].poll"] == {"delivered": True}


async def test_the_body_succeeding_skips_the_fallback_and_its_result_is_the_nodes() -> None:
    shop = Shop()
    run = await SagaTestEnv(Checkout, [shop]).start({"customer": "ann", "polls": 1})
    assert await run.run_to_end() == "completed"
    assert ("invoice", "bill") not in shop.log and ("confirm", "card") in shop.log
    assert run.results()["pay"] == {"charged": True}


async def test_the_loop_cap_rolls_everything_back_iterations_in_reverse() -> None:
    shop = Shop()
    run = await SagaTestEnv(Checkout, [shop]).start({"customer": "broke", "polls": 9})
    assert await run.run_to_end() == "compensated"
    undos = [entry for entry in shop.log if entry[0] in ("untrack", "void")]
    assert undos == [("untrack", "delivery[3].poll"), ("untrack", "delivery[2].poll"),
                     ("untrack", "delivery[1].poll"), ("untrack", "delivery[0].poll"),
                     ("void", "bill")]
    assert "max_iterations=4 reached" in (run.state.reason or "")


async def test_the_yaml_form_runs_the_same_in_the_kit() -> None:
    text = to_yaml(export(Checkout))
    assert "kind: catch\n" in text and "kind: loop\n" in text
    loaded = load_saga(text)
    assert compile_saga(loaded).to_json() == compile_saga(Checkout).to_json()
    shop = Shop()
    run = await SagaTestEnv(loaded, [shop]).start({"customer": "broke"})
    assert await run.run_to_end() == "completed"
    assert [e for e in shop.log if e[0] == "track"] == [
        ("track", f"delivery[{i}].poll") for i in range(3)]


async def test_the_declarative_pages_yaml_example_loads_and_runs_in_the_kit() -> None:
    text = next(b for b in re.findall(r"```yaml\n(.*?)```", DECLARATIVE_PAGE, re.S)
                if "kind: loop" in b)
    cls = load_saga(text)
    parts = [_doc_participant(n, a, tcc) for n, a, tcc in (
        ("payments", "charge", True), ("billing", "send_invoice", False),
        ("shipping", "status", False))]
    run = await SagaTestEnv(cls, parts).start({"order_id": "o-1", "customer_id": "broke"})
    assert await run.run_to_end() == "completed"
    results = run.results()
    assert results["payment"] == {"ok": "invoice"}  # the card was declined: invoiced
    assert len(results["tracking"]) == 2  # delivered on the second poll
    assert results["tracking[1].poll"] == {"ok": "tracking[1].poll", "delivered": True}


def _doc_participant(name: str, action: str, tcc: bool) -> Participant:
    """Declines customer 'broke'; the carrier says delivered on the second poll."""

    async def forward(self: Any, ctx: HandlerContext, body: Body) -> dict[str, Any]:
        data = body.model_dump()
        if data.get("customer") == "broke" and tcc:
            raise BusinessRejection("declined")
        if action == "status":
            return {"ok": ctx.step, "delivered": data["attempt"] >= 1}
        return {"ok": ctx.step}

    async def back(self: Any, ctx: HandlerContext, body: Body) -> None:
        return None

    methods: dict[str, Any] = {"name": name}
    if tcc:
        methods |= {"t": on_try(action)(forward), "c": on_confirm(action)(back),
                    "x": on_cancel(action)(back)}
    else:
        methods |= {"a": on_action(action)(forward), "x": on_compensate(action)(back)}
    return type(f"{name.title()}Doc", (Participant,), methods)()


def test_a_yaml_catch_or_loop_with_a_mistake_is_refused_with_its_path() -> None:
    import pytest

    from coordinator.definitions import InvalidDefinition

    head = ("name: bad\nversion: 1\ninput: {type: object, properties: {a: {type: string}}}\n"
            "steps:\n")
    ok = "{kind: saga, name: s, participant: p, action: a, compensable: true}"
    once = "{kind: saga, name: s, participant: p, action: a, compensable: false}"
    other = "{kind: saga, name: f, participant: p, action: a, compensable: true}"
    cases = {
        f"  - {{kind: loop, name: l, until: '`true`', body: [{ok}]}}":
            "steps[0].max_iterations: Field required",
        f"  - {{kind: catch, name: c, failures: [oops], body: [{ok}], fallback: [{other}]}}":
            "steps[0].failures",
        f"  - {{kind: catch, name: c, failures: all, body: [{once}], fallback: [{other}]}}":
            "body step 's' cannot be undone",
    }
    for body, expected in cases.items():
        with pytest.raises(InvalidDefinition) as refused:
            load_saga(head + body + "\n")
        assert expected in str(refused.value), str(refused.value)
