"""The checkout saga: a tree of nodes. Hold the payment (TCC), reserve stock for each order
line (a for-each, two lines at a time), then book the shipment with whichever of two carriers
answers first (a race; the other carrier's booking is cancelled).

The holds are captured once a carrier is booked; if any line is out of stock, the payment and
every line already reserved are released and no carrier is asked.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from coordinator.language import ForEach, Race, RetryPolicy, Saga, SagaStep, StepContext, TccStep


class Line(BaseModel):
    sku: str = Field(min_length=1, max_length=100)
    quantity: int = Field(gt=0)


class CheckoutInput(BaseModel):
    order_id: str = Field(min_length=1, max_length=100)
    customer_id: str = Field(min_length=1, max_length=100)
    amount_cents: int = Field(gt=0)
    address: str = Field(min_length=1, max_length=500)
    lines: list[Line] = Field(min_length=1, max_length=20)


def funds(ctx: StepContext[CheckoutInput]) -> dict[str, Any]:
    return {"customer": ctx.input.customer_id, "amount": ctx.input.amount_cents}


def line_stock(ctx: StepContext[CheckoutInput]) -> dict[str, Any]:
    return {"sku": ctx.item["sku"], "quantity": ctx.item["quantity"]}


def booking(ctx: StepContext[CheckoutInput]) -> dict[str, Any]:
    parcels = sum(line.quantity for line in ctx.input.lines)
    return {"order_id": ctx.input.order_id, "address": ctx.input.address, "parcels": parcels}


_QUICK = RetryPolicy(max_attempts=5, initial_backoff=timedelta(milliseconds=200),
                     max_backoff=timedelta(seconds=5))
_TEN_SECONDS = timedelta(seconds=10)


def _carrier(name: str) -> SagaStep:
    return SagaStep(name, name, "book", compensable=True, payload=booking, retry=_QUICK,
                    deadline=_TEN_SECONDS)


class CheckoutSaga(Saga):
    """Take payment, reserve every line's stock, ship with the first carrier to book."""

    name = "checkout"
    version = 1
    input_model = CheckoutInput
    steps = (
        TccStep("reserve_funds", "payments", "charge", payload=funds, retry=_QUICK,
                deadline=_TEN_SECONDS),
        ForEach("lines", items=lambda ctx: ctx.input.lines, max_concurrency=2, max_items=20,
                body=(TccStep("reserve_stock", "inventory", "reserve", payload=line_stock,
                              retry=_QUICK, deadline=_TEN_SECONDS),)),
        Race("ship", branches=(_carrier("carrier_a"), _carrier("carrier_b"))),
    )
