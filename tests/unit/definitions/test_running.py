"""A YAML saga runs in the test kit like its class: the same commands, payloads and outcome;
an expression that fails at run time fails its node with the expression in the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from coordinator.definitions import load_saga, load_saga_file
from coordinator.engine.compiled import compile_saga
from coordinator.language.saga import Saga
from coordinator.testing import SagaTestEnv
from examples.checkout_saga import CheckoutSaga
from examples.order_saga import OrderSaga
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

ROOT = Path(__file__).resolve().parents[3]


class Body(BaseModel):
    model_config = ConfigDict(extra="allow")


def recording(name: str, action: str, tcc: bool, log: list[Any]) -> Participant:
    """A participant that records every command it gets in ``log`` (kept when the handler
    rejects, unlike its tables), and refuses customer ``broke``."""

    async def forward(self: Any, ctx: HandlerContext, body: Body) -> dict[str, Any]:
        log.append((name, "forward", ctx.step, repr(body.model_dump())))
        if body.model_dump().get("customer") == "broke":
            raise BusinessRejection("insufficient funds")
        return {"ok": ctx.step}

    async def back(self: Any, ctx: HandlerContext, body: Body) -> None:
        log.append((name, "back", ctx.step, repr(body.model_dump())))

    methods: dict[str, Any] = {"name": name}
    if tcc:
        methods |= {"t": on_try(action)(forward), "c": on_confirm(action)(back),
                    "x": on_cancel(action)(back)}
    else:
        methods |= {"a": on_action(action)(forward), "x": on_compensate(action)(back)}
    return type(f"{name.title()}Participant", (Participant,), methods)()


def participants(log: list[Any]) -> list[Participant]:
    return [recording("payments", "charge", True, log),
            recording("inventory", "reserve", True, log),
            recording("shipping", "ship", False, log), recording("carrier_a", "book", False, log),
            recording("carrier_b", "book", False, log)]


ORDER = {"order_id": "o-1", "customer_id": "c-1", "amount_cents": 500, "sku": "sku-1",
         "quantity": 2, "address": "1 Main St"}
CHECKOUT = {"order_id": "o-1", "customer_id": "c-1", "amount_cents": 500, "address": "x",
            "lines": [{"sku": "a", "quantity": 2}, {"sku": "b", "quantity": 3}]}


async def _run(cls: type[Saga], data: dict[str, Any]) -> tuple[str, list[Any]]:
    log: list[Any] = []
    run = await SagaTestEnv(cls, participants(log)).start(data)
    await run.run_to_end()
    return run.status, sorted(log)


@pytest.mark.parametrize(("file", "cls", "data"), [
    ("order_saga.yaml", OrderSaga, ORDER),
    ("order_saga.yaml", OrderSaga, {**ORDER, "customer_id": "broke"}),
    ("checkout_saga.yaml", CheckoutSaga, CHECKOUT),
    ("checkout_saga.yaml", CheckoutSaga, {**CHECKOUT, "customer_id": "broke"}),
])
async def test_a_yaml_saga_sends_what_its_class_sends_and_ends_the_same(
    file: str, cls: type[Saga], data: dict[str, Any]
) -> None:
    declared = await _run(load_saga_file(ROOT / "examples" / file), data)
    written = await _run(cls, data)
    assert declared == written
    assert declared[0] == ("compensated" if data["customer_id"] == "broke" else "completed")
    assert declared[1]


FAILING = """
name: failing
version: 1
input: {type: object, properties: {n: {type: integer}}, required: [n]}
steps:
  - kind: saga
    name: first
    participant: shipping
    action: ship
    compensable: true
  - kind: saga
    name: second
    participant: shipping
    action: ship
    compensable: true
    payload: "{n: abs(input.missing)}"
"""


async def test_an_expression_failing_at_run_time_fails_its_node_naming_the_expression() -> None:
    cls = load_saga(FAILING)
    env = SagaTestEnv(cls, [recording("shipping", "ship", False, [])])
    run = await env.start({"n": 1})
    await run.run_to_end()
    assert run.status == "compensated"  # the first step was undone
    error = run.state.steps["second"].last_error
    reason = f"{run.state.reason} / {error}"
    assert "'{n: abs(input.missing)}'" in reason and "abs()" in reason, reason


async def test_a_query_is_an_expression_over_status_input_and_results() -> None:
    cls = load_saga(FAILING.replace("abs(input.missing)", "input.n") + "queries:\n"
                    "  progress: '{status: status, n: input.n, first: results.first.ok}'\n")
    env = SagaTestEnv(cls, [recording("shipping", "ship", False, [])])
    run = await env.start({"n": 7})
    assert run.query("progress") == {"status": "completed", "n": 7, "first": "first"}


def test_a_worker_registers_a_definition_file_named_like_a_class() -> None:
    from coordinator.sagas.loading import SagaImportError, build_registry

    registry = build_registry([str(ROOT / "examples" / "order_saga.yaml"),
                               "examples.checkout_saga:CheckoutSaga"], topic_prefix="t")
    assert registry.names() == ["checkout", "order"]
    assert registry.latest("order").to_json() == compile_saga(OrderSaga, topic_prefix="t").to_json()
    with pytest.raises(SagaImportError, match="steps: Field required"):
        build_registry([str(ROOT / "docs" / "saga-definition.schema.json")], topic_prefix="t")


def test_the_compatibility_check_reads_a_definitions_input_signals_and_queries() -> None:
    from coordinator.versioning.compat import compare_sagas

    with_query = FAILING + "queries:\n  progress: 'input.n'\n"
    old, new = load_saga(with_query), load_saga(with_query.replace(
        "required: [n]", "required: [n, m]").replace("{n: {type: integer}}",
                                                     "{n: {type: integer}, m: {type: string}}"))
    assert [str(c) for c in compare_sagas(old, new)] == [
        "BREAKING  input.m: new required field"]
    assert compare_sagas(old, load_saga(FAILING))[0].what == "query removed"
