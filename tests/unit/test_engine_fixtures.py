"""Saga definitions and helpers shared by the engine tests (this module holds no tests)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from coordinator.engine import CompiledSaga, compile_saga
from coordinator.language.saga import RetryPolicy, Saga, SagaStep, TccStep
from examples.order_saga import OrderSaga

FAST = RetryPolicy(max_attempts=3, initial_backoff=timedelta(seconds=1),
                   max_backoff=timedelta(seconds=4), jitter=0.5)
ROLLBACK = RetryPolicy(max_attempts=3, initial_backoff=timedelta(seconds=2),
                       max_backoff=timedelta(seconds=10))

ORDER_INPUT: dict[str, Any] = {
    "order_id": "o-1", "customer_id": "c-1", "amount_cents": 1250, "sku": "sku-9",
    "quantity": 2, "address": "1 Main St",
}


class Flags(BaseModel):
    n: int = 1
    ship: bool = True


def _tcc(name: str, participant: str) -> TccStep:
    return TccStep(name, participant, "reserve", retry=FAST, confirm_retry=ROLLBACK,
                   cancel_retry=ROLLBACK)


def _saga(name: str, participant: str, compensable: bool = True) -> SagaStep:
    return SagaStep(name, participant, "do", compensable=compensable, retry=FAST,
                    compensation_retry=ROLLBACK)


class Mixed(Saga):
    """TCC, saga step, TCC: confirms happen after every forward step succeeded."""

    name = "mixed"
    version = 1
    input_model = Flags
    steps = (_tcc("a", "pa"), _saga("b", "pb"), _tcc("c", "pc"))


class WithPivot(Saga):
    """A saga step that cannot be undone sits between reversible ones."""

    name = "pivot"
    version = 1
    input_model = Flags
    steps = (_tcc("a", "pa"), _saga("pivot", "pp", False), _saga("c", "pc"))


class Guarded(Saga):
    name = "guarded"
    version = 1
    input_model = Flags
    steps = (
        _saga("first", "p1"),
        SagaStep("ship", "shipping", "create", compensable=True, retry=FAST,
                 compensation_retry=ROLLBACK, when=lambda ctx: ctx.input.ship,
                 payload=lambda ctx: {"n": ctx.input.n, "first": ctx.results["first"]}),
        _tcc("last", "p3"),
    )


class AllSaga(Saga):
    name = "all_saga"
    version = 1
    input_model = Flags
    steps = (_saga("s1", "p1"), _saga("s2", "p2"), _saga("s3", "p3"))


def compiled(cls: type[Saga]) -> CompiledSaga:
    return compile_saga(cls)


ALL_DEFINITIONS: list[CompiledSaga] = [
    compiled(OrderSaga), compiled(Mixed), compiled(WithPivot), compiled(Guarded),
    compiled(AllSaga),
]
