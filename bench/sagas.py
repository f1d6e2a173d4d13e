"""Bench saga classes: N TCC steps spread over payments, inventory and shipping.

``Tcc1``, ``Tcc3`` and ``Tcc6`` try steps round-robin over the three participants (payments
``charge``, inventory ``reserve``, shipping ``book``; ``book`` is the TCC action that
:mod:`bench.participants` adds to the example shipping service). ``Tcc3`` is the order saga with
three TCC participants that the end-to-end figures use. ``Waiting`` tries payments and then a
participant that never runs, so its sagas park mid-saga (the coordinator memory figure).
``Steps3`` is the same order as three saga steps (action, then compensation on rollback; no
confirm phase): payments ``debit``, inventory ``take``, shipping ``ship``
(:mod:`bench.participants` adds the first two to the example services).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from coordinator.language.saga import RetryPolicy, Saga, SagaStep, StepContext, TccStep

__all__ = ["ABSENT", "BenchInput", "Steps3", "Tcc1", "Tcc3", "Tcc6", "Waiting", "saga_for_steps"]

#: A participant no process serves: commands to it wait forever.
ABSENT = "warehouse"


class BenchInput(BaseModel):
    customer_id: str = Field(min_length=1, max_length=100)
    amount_cents: int = Field(gt=0)
    sku: str = Field(min_length=1, max_length=100)
    quantity: int = Field(gt=0)
    address: str = Field(min_length=1, max_length=500)


def _funds(ctx: StepContext[BenchInput]) -> dict[str, Any]:
    return {"customer": ctx.input.customer_id, "amount": ctx.input.amount_cents}


def _stock(ctx: StepContext[BenchInput]) -> dict[str, Any]:
    return {"sku": ctx.input.sku, "quantity": ctx.input.quantity}


def _booking(ctx: StepContext[BenchInput]) -> dict[str, Any]:
    return {"address": ctx.input.address, "items": [ctx.input.sku] * ctx.input.quantity}


_RETRY = RetryPolicy(max_attempts=5, initial_backoff=timedelta(milliseconds=200),
                     max_backoff=timedelta(seconds=5))
# Long enough that a loaded run never times a step out (a timeout would be a retry, not load).
_DEADLINE = timedelta(minutes=5)
_CYCLE = (("funds", "payments", "charge", _funds),
          ("stock", "inventory", "reserve", _stock),
          ("booking", "shipping", "book", _booking))


def _steps(n: int) -> tuple[TccStep, ...]:
    out = []
    for i in range(n):
        label, participant, action, mapper = _CYCLE[i % len(_CYCLE)]
        out.append(TccStep(f"{label}_{i + 1}", participant, action, payload=mapper, retry=_RETRY,
                           deadline=_DEADLINE, rollback_deadline=_DEADLINE))
    return tuple(out)


class Tcc1(Saga):
    """One TCC step (payments)."""

    name = "bench_tcc1"
    input_model = BenchInput
    steps = _steps(1)


class Tcc3(Saga):
    """The order saga as three TCC steps: payments, inventory, shipping."""

    name = "bench_tcc3"
    input_model = BenchInput
    steps = _steps(3)


class Tcc6(Saga):
    """Six TCC steps, each participant twice."""

    name = "bench_tcc6"
    input_model = BenchInput
    steps = _steps(6)


class Steps3(Saga):
    """The order saga as three saga steps: debit, take stock, ship; each compensable."""

    name = "bench_steps3"
    input_model = BenchInput
    steps = tuple(
        SagaStep(f"{label}_{i + 1}", participant, action, payload=mapper, retry=_RETRY,
                 compensable=True, deadline=_DEADLINE, rollback_deadline=_DEADLINE)
        for i, (label, participant, action, mapper) in enumerate((
            ("debit", "payments", "debit", _funds),
            ("take", "inventory", "take", _stock),
            ("ship", "shipping", "ship", _booking),
        ))
    )


class Waiting(Saga):
    """Payments, then a participant that never answers: the saga waits mid-saga."""

    name = "bench_waiting"
    input_model = BenchInput
    steps = (
        _steps(1)[0],
        TccStep("absent", ABSENT, "hold", retry=RetryPolicy(max_attempts=1),
                deadline=timedelta(days=1), rollback_deadline=timedelta(days=1)),
    )


_BY_STEPS: dict[int, type[Saga]] = {1: Tcc1, 3: Tcc3, 6: Tcc6}


def saga_for_steps(n: int) -> type[Saga]:
    """The bench saga class with ``n`` TCC steps (1, 3 or 6)."""
    return _BY_STEPS[n]
