"""Order with payment and stock: hold the amount, reserve every line's stock (a bounded
for-each), optionally book the shipment; then capture everything, or release all of it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from coordinator.language.nodes import ForEach
from coordinator.language.saga import Saga, SagaStep, StepContext, TccStep
from coordinator.sagas.patterns.catalog import FORWARD_RETRY, Pattern, build_saga

__all__ = ["ORDER", "OrderInput", "OrderLine", "order_saga"]

VERSION = 1


class OrderLine(BaseModel):
    sku: str = Field(min_length=1, max_length=100)
    quantity: int = Field(gt=0)


class OrderInput(BaseModel):
    order_id: str = Field(min_length=1, max_length=100)
    customer_id: str = Field(min_length=1, max_length=100)
    amount_cents: int = Field(gt=0)
    lines: list[OrderLine] = Field(min_length=1, max_length=100)
    address: str = Field(default="", max_length=500)


def _funds(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"order_id": ctx.input.order_id, "customer": ctx.input.customer_id,
            "amount": ctx.input.amount_cents}


def _lines(ctx: StepContext[OrderInput]) -> list[dict[str, Any]]:
    return [line.model_dump() for line in ctx.input.lines]


def _stock(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"order_id": ctx.input.order_id, **ctx.item}


def _shipment(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"order_id": ctx.input.order_id, "address": ctx.input.address,
            "parcels": sum(line.quantity for line in ctx.input.lines)}


def order_saga(name: str = "order", *, version: int = 1, payments: str = "payments",
               inventory: str = "inventory", shipping: str | None = "shipping",
               lines_at_once: int = 4) -> type[Saga]:
    """``shipping=None`` leaves the shipment out (a digital good, a pick-up)."""
    steps: list[Any] = [
        TccStep("hold_payment", payments, "charge", payload=_funds, retry=FORWARD_RETRY),
        ForEach("lines", items=_lines, max_concurrency=lines_at_once, max_items=100,
                body=(TccStep("reserve_stock", inventory, "reserve", payload=_stock,
                              retry=FORWARD_RETRY),)),
    ]
    if shipping is not None:
        steps.append(SagaStep("ship", shipping, "ship", payload=_shipment, compensable=True,
                              retry=FORWARD_RETRY))
    return build_saga("order", VERSION, name=name, version=version, input_model=OrderInput,
                      steps=steps, description="Hold the payment, reserve each line's "
                      "stock" + (", book the shipment" if shipping else "") + "; capture all "
                      "or release all.")


ORDER = Pattern("order", VERSION, "payment and stock held together, captured or released",
                [(1, "hold_payment (TCC), lines (for-each of reserve_stock TCC), optional "
                     "ship (saga step)")], order_saga)
