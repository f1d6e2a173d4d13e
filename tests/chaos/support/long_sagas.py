"""A long-running order for chaos scenarios: a sleep and a wait for a signal around the
order's reservations, so the coordinator can be killed while timers and signals are due.

The sleep comes first and the wait after it: a signal sent at once arrives before its wait
is reached (kept, consumed later), and no saga can finish before its signal is sent.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field

from coordinator.language.nodes import Sleep, WaitForSignal
from coordinator.language.saga import RetryPolicy, Saga, SagaStep, TccStep
from examples.order_saga import OrderInput, funds, shipment, stock

#: The signal every long order waits for, and its payload.
APPROVAL = "approved"
_QUICK = RetryPolicy(max_attempts=5, initial_backoff=timedelta(milliseconds=200),
                     max_backoff=timedelta(seconds=5))


class LongOrderInput(OrderInput):
    nap_s: float = Field(gt=0, le=10)


class Approval(BaseModel):
    approver: str = Field(min_length=1)


class LongOrderSaga(Saga):
    """Nap, wait for approval, reserve funds, nap again, then stock and shipment."""

    name = "order_long"
    version = 1
    input_model = LongOrderInput
    steps = (
        Sleep("nap", lambda ctx: timedelta(seconds=ctx.input.nap_s)),
        WaitForSignal("approval", APPROVAL, payload=Approval, timeout=timedelta(seconds=90)),
        TccStep("reserve_funds", "payments", "charge", payload=funds, retry=_QUICK,
                deadline=timedelta(seconds=10)),
        Sleep("cool_off", timedelta(seconds=1)),
        TccStep("reserve_stock", "inventory", "reserve", payload=stock, retry=_QUICK,
                deadline=timedelta(seconds=10)),
        SagaStep("create_shipment", "shipping", "ship", compensable=True,
                 payload=shipment, retry=_QUICK, deadline=timedelta(seconds=10)),
    )
