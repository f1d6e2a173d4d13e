"""A saga with search attributes from its input and its results, shared by the search tests."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from coordinator.language import SagaStep, SearchAttribute, TccStep
from coordinator.language.saga import Saga


class ShopInput(BaseModel):
    order_id: str
    customer_id: str
    amount_cents: int
    vip: bool = False
    tags: list[str] = []
    placed_at: datetime | None = None


class Shop(Saga):
    name = "shop"
    input_model = ShopInput
    steps = (
        TccStep("pay", "payments", "charge"),
        SagaStep("ship", "shipping", "ship", compensable=True),
        TccStep("notify", "mail", "send"),
    )
    search = (
        SearchAttribute("customer_id", str, lambda ctx: ctx.input.customer_id),
        SearchAttribute("amount", int, lambda ctx: ctx.input.amount_cents),
        SearchAttribute("euros", float, lambda ctx: ctx.input.amount_cents / 100),
        SearchAttribute("vip", bool, lambda ctx: ctx.input.vip),
        SearchAttribute("tags", list[str], lambda ctx: ctx.input.tags),
        SearchAttribute("placed_at", datetime, lambda ctx: ctx.input.placed_at),
        SearchAttribute("carrier", str, lambda ctx: ctx.results["ship"]["carrier"]),
    )


class ReturnInput(BaseModel):
    customer_id: str


class Return(Saga):
    """Another type sharing the ``customer_id`` attribute: one filter finds both."""

    name = "shop_return"
    input_model = ReturnInput
    steps = (TccStep("refund", "payments", "refund"),)
    search = (SearchAttribute("customer_id", str, lambda ctx: ctx.input.customer_id),)


SAGAS = [Shop, Return]
