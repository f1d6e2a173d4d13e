"""The order saga: reserve funds and stock (TCC), then create the shipment (saga step).

Payments and inventory hold reservations that are confirmed once the shipment exists, or
cancelled if anything fails; a shipment is cancelled by its compensation.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from coordinator.language import (
    ChildSaga,
    Parallel,
    RetryPolicy,
    Saga,
    SagaStep,
    StepContext,
    TccStep,
)


class OrderInput(BaseModel):
    order_id: str = Field(min_length=1, max_length=100)
    customer_id: str = Field(min_length=1, max_length=100)
    amount_cents: int = Field(gt=0)
    sku: str = Field(min_length=1, max_length=100)
    quantity: int = Field(gt=0)
    address: str = Field(min_length=1, max_length=500)


def funds(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"customer": ctx.input.customer_id, "amount": ctx.input.amount_cents}


def stock(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"sku": ctx.input.sku, "quantity": ctx.input.quantity}


def shipment(ctx: StepContext[OrderInput]) -> dict[str, Any]:
    return {"address": ctx.input.address, "items": [ctx.input.sku] * ctx.input.quantity}


_QUICK = RetryPolicy(max_attempts=5, initial_backoff=timedelta(milliseconds=200),
                     max_backoff=timedelta(seconds=5))


class OrderSaga(Saga):
    """Take payment and stock for an order, then ship it."""

    name = "order"
    version = 1
    input_model = OrderInput
    steps = (
        TccStep("reserve_funds", "payments", "charge", payload=funds, retry=_QUICK,
                deadline=timedelta(seconds=10)),
        TccStep("reserve_stock", "inventory", "reserve", payload=stock, retry=_QUICK,
                deadline=timedelta(seconds=10)),
        SagaStep("create_shipment", "shipping", "ship", compensable=True,
                 payload=shipment, retry=_QUICK, deadline=timedelta(seconds=10)),
    )


class ParallelOrderSaga(Saga):
    """The same order with payment and stock reserved at once, then shipped.

    If either reservation is refused, the other (done or still in flight) is cancelled."""

    name = "order_parallel"
    version = 1
    input_model = OrderInput
    steps = (
        Parallel("reserve", (
            TccStep("reserve_funds", "payments", "charge", payload=funds, retry=_QUICK,
                    deadline=timedelta(seconds=10)),
            TccStep("reserve_stock", "inventory", "reserve", payload=stock, retry=_QUICK,
                    deadline=timedelta(seconds=10)),
        )),
        SagaStep("create_shipment", "shipping", "ship", compensable=True,
                 payload=shipment, retry=_QUICK, deadline=timedelta(seconds=10)),
    )


class FulfilmentSaga(Saga):
    """Stock and shipment for an order, run as a child saga of :class:`NestedOrderSaga`."""

    name = "order_fulfilment"
    version = 1
    input_model = OrderInput
    steps = (
        TccStep("reserve_stock", "inventory", "reserve", payload=stock, retry=_QUICK,
                deadline=timedelta(seconds=10)),
        SagaStep("create_shipment", "shipping", "ship", compensable=True,
                 payload=shipment, retry=_QUICK, deadline=timedelta(seconds=10)),
    )


class NestedOrderSaga(Saga):
    """The same order with its fulfilment in a child saga (its own row and history).

    The child's stock reservation is confirmed only when the whole order succeeds; if the
    child fails, or anything after it, both roll back."""

    name = "order_nested"
    version = 1
    input_model = OrderInput
    steps = (
        TccStep("reserve_funds", "payments", "charge", payload=funds, retry=_QUICK,
                deadline=timedelta(seconds=10)),
        ChildSaga("fulfil", FulfilmentSaga, input=lambda ctx: ctx.input.model_dump(),
                  deadline=timedelta(seconds=60)),
    )
