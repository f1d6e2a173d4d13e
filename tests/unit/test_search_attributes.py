"""Search attributes as a saga author meets them: the class's declaration checked, values of
the wrong type refused, the test kit computing them and matching filters, and the declarative
format's JMESPath attributes, loaded and exported (issue 37)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from coordinator.definitions import InvalidDefinition, export, load_saga, to_yaml
from coordinator.language import DefinitionError, Saga, SagaStep, SearchAttribute, TccStep
from coordinator.language.search_attributes import AttributeValueError, normalise
from coordinator.sagas.filters import FilterError
from coordinator.testing import SagaTestEnv
from participant_sdk import (
    HandlerContext,
    Participant,
    on_action,
    on_cancel,
    on_compensate,
    on_confirm,
    on_try,
)


class Order(BaseModel):
    customer_id: str
    amount_cents: int
    tags: list[str] = []


def _saga(**attrs: Any) -> type[Saga]:
    return type("S", (Saga,), {"name": "s", "input_model": Order, **attrs,
                               "steps": (TccStep("pay", "payments", "charge"),)})


@pytest.mark.parametrize(("search", "message"), [
    ("customer_id", "`search` must be a tuple of SearchAttribute"),
    (("customer_id",), "search[0]: must be a SearchAttribute"),
    ((SearchAttribute("9lives", str, len),), "name must be a letter or _"),
    ((SearchAttribute("status", str, len),), "'status' is a built-in field or a word"),
    ((SearchAttribute("and", str, len),), "'and' is a built-in field or a word"),
    ((SearchAttribute("type", str, len),), "'type' is a built-in field or a word"),
    ((SearchAttribute("a", str, len), SearchAttribute("a", int, len)),
     "search[1]: duplicate search attribute 'a'"),
    ((SearchAttribute("a", dict, len),), "type must be str, int, float, bool, datetime or "
                                         "list[str], got <class 'dict'>"),
    ((SearchAttribute("a", str, "input.x"),), "source must be a function of the Search"),
    (tuple(SearchAttribute(f"a{i}", str, len) for i in range(51)), "more than 50"),
])
def test_every_declaration_problem_is_reported(search: Any, message: str) -> None:
    with pytest.raises(DefinitionError, match=message.replace("[", r"\[").replace("(", r"\(")):
        _saga(search=search)


@pytest.mark.parametrize(("kind", "value", "stored"), [
    ("str", "x", "x"), ("int", 3, 3), ("float", 3, 3.0), ("bool", False, False),
    ("datetime", "2026-05-01T12:00:00Z", datetime(2026, 5, 1, 12, tzinfo=UTC)),
    ("keywords", ["b", "a", "b"], ["a", "b"]), ("keywords", [], None), ("str", None, None),
])
def test_values_are_normalised(kind: Any, value: Any, stored: Any) -> None:
    assert normalise(kind, value) == stored


@pytest.mark.parametrize(("kind", "value"), [
    ("str", 3), ("str", "x" * 501), ("str", "a\x00"), ("int", True), ("int", 1.5),
    ("int", 10**18), ("float", float("nan")), ("float", "1"), ("bool", 1),
    ("datetime", datetime(2026, 1, 1)), ("datetime", "soon"), ("keywords", "ab"),
    ("keywords", [1]), ("keywords", ["x"] * 101),
])
def test_values_of_another_type_are_refused(kind: Any, value: Any) -> None:
    with pytest.raises(AttributeValueError, match="is not a"):
        normalise(kind, value)


class Payments(Participant):
    name = "payments"

    @on_try("charge")
    async def charge(self, ctx: HandlerContext, body: Order) -> dict[str, Any]:
        return {"receipt": f"r-{body.customer_id}"}

    @on_confirm("charge")
    async def confirm(self, ctx: HandlerContext, body: Order) -> None:
        return None

    @on_cancel("charge")
    async def cancel(self, ctx: HandlerContext, body: Order) -> None:
        return None


class Shipping(Participant):
    name = "shipping"

    @on_action("ship")
    async def ship(self, ctx: HandlerContext, body: Order) -> dict[str, Any]:
        return {"carrier": "ups" if body.amount_cents > 100 else 7}

    @on_compensate("ship")
    async def unship(self, ctx: HandlerContext, body: Order) -> None:
        return None


class Shop(Saga):
    name = "shop"
    input_model = Order
    business_key = "customer_id"
    steps = (TccStep("pay", "payments", "charge"),
             SagaStep("ship", "shipping", "ship", compensable=True))
    search = (
        SearchAttribute("customer", str, lambda ctx: ctx.input.customer_id),
        SearchAttribute("amount", int, lambda ctx: ctx.input.amount_cents),
        SearchAttribute("receipt", str, lambda ctx: ctx.results["pay"]["receipt"]),
        SearchAttribute("carrier", str, lambda ctx: ctx.results["ship"]["carrier"]),
    )


async def test_the_test_kit_computes_the_values_and_matches_filters() -> None:
    run = await SagaTestEnv(Shop, [Payments(), Shipping()]).start(
        {"customer_id": "c-42", "amount_cents": 1500})
    await run.run_to_end()
    assert run.matches("customer = 'c-42' and amount > 1000")
    assert not run.matches("carrier = 'dhl'") and not run.matches("amount > 1500")
    assert run.search_attributes() == {"customer": "c-42", "amount": 1500,
                                       "receipt": "r-c-42", "carrier": "ups"}
    assert run.matches("carrier = 'ups' and status = 'completed' and type = 'shop'")
    assert run.matches("business_key = 'c-42' and created_at >= '2026-01-01'")
    with pytest.raises(FilterError, match="unknown field 'colour'"):
        run.matches("colour = 'red'")


async def test_the_test_kit_raises_on_a_value_of_the_wrong_type() -> None:
    run = await SagaTestEnv(Shop, [Payments(), Shipping()]).start(
        {"customer_id": "c-1", "amount_cents": 5})
    await run.run_to_end()
    with pytest.raises(AttributeValueError, match="'carrier' of shop v1: 7 is not a text"):
        run.search_attributes()


SHOP_YAML = """
name: shop
version: 1
input:
  type: object
  properties:
    customer_id: {type: string}
    amount_cents: {type: integer}
    tags: {type: array, items: {type: string}}
  required: [customer_id, amount_cents]
search:
  - {name: customer, type: str, expr: input.customer_id}
  - {name: amount, type: int, expr: input.amount_cents}
  - {name: tags, type: keywords, expr: input.tags}
  - {name: receipt, type: str, expr: results.pay.receipt, description: from the payment}
steps:
  - {kind: tcc, name: pay, participant: payments, action: charge}
"""


async def test_a_definition_declares_attributes_as_jmespath_and_exports_them() -> None:
    cls = load_saga(SHOP_YAML)
    run = await SagaTestEnv(cls, [Payments()]).start(
        {"customer_id": "c-7", "amount_cents": 20, "tags": ["gift"]})
    await run.run_to_end()
    assert run.search_attributes() == {"customer": "c-7", "amount": 20, "tags": ["gift"],
                                       "receipt": "r-c-7"}
    assert run.matches("tags = 'gift' and receipt = 'r-c-7'")
    exported = to_yaml(export(cls))
    assert "expr: results.pay.receipt" in exported and "type: keywords" in exported
    again = load_saga(exported)
    assert [(a.name, a.kind, a.description) for a in again.search] == [
        (a.name, a.kind, a.description) for a in cls.search]


@pytest.mark.parametrize(("old", "new", "message"), [
    ("expr: input.customer_id}", "expr: 'input.[['}",
     "search[0].expr: Value error, not a JMESPath expression"),
    ("type: str, expr: input.customer_id}", "type: text, expr: x}",
     "search[0].type: Input should be 'str', 'int', 'float', 'bool', 'datetime' or "
     "'keywords'"),
    ("name: customer,", "name: status,", "search[0]: 'status' is a built-in field"),
])
def test_a_bad_attribute_in_a_definition_is_reported_at_its_path(old: str, new: str,
                                                                 message: str) -> None:
    with pytest.raises(InvalidDefinition) as caught:
        load_saga(SHOP_YAML.replace(old, new, 1))
    assert message in str(caught.value)


def test_a_class_attribute_without_an_expression_cannot_be_exported() -> None:
    with pytest.raises(InvalidDefinition, match=r"search\.customer: is a Python function"):
        export(Shop)
    assert "search:" in to_yaml(export(Shop, {
        "search.customer": "input.customer_id", "search.amount": "input.amount_cents",
        "search.receipt": "results.pay.receipt", "search.carrier": "results.ship.carrier",
        "steps[1].payload": "input"}))
