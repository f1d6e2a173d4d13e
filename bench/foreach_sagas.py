"""Bench saga classes for the for-each cost figures (issue 15).

``ShipEach`` is one for-each over ``lines`` items (``lines`` is part of the input, up to
:data:`MAX_LINES`), ten at a time, whose body is one compensable saga step: the example
shipping service's ``ship`` action, so the real participants of the bench stack serve it.
Its input is :class:`bench.sagas.BenchInput` plus ``lines``, so the bench's load driver can
start it like the linear sagas.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field

from bench.sagas import BenchInput
from coordinator.language.nodes import ForEach
from coordinator.language.saga import RetryPolicy, Saga, SagaStep, StepContext, TccStep

__all__ = ["CONCURRENCY", "MAX_LINES", "ForEachInput", "HoldEach", "ShipEach"]

MAX_LINES = 1000
CONCURRENCY = 10


class ForEachInput(BenchInput):
    lines: int = Field(default=100, ge=0, le=MAX_LINES)


def _lines(ctx: StepContext[ForEachInput]) -> list[int]:
    return list(range(ctx.input.lines))


def _shipment(ctx: StepContext[ForEachInput]) -> dict[str, Any]:
    return {"address": ctx.input.address, "items": [f"{ctx.input.sku}-{ctx.index}"]}


# Long enough that a loaded run never times a step out (a timeout would be a retry, not load).
_DEADLINE = timedelta(minutes=5)


class ShipEach(Saga):
    """One shipment per line, at most ten in flight."""

    name = "bench_ship_each"
    input_model = ForEachInput
    steps = (
        ForEach("lines", items=_lines, max_concurrency=CONCURRENCY, max_items=MAX_LINES,
                body=(SagaStep("ship", "shipping", "ship", compensable=True, payload=_shipment,
                               retry=RetryPolicy(max_attempts=5), deadline=_DEADLINE,
                               rollback_deadline=_DEADLINE),)),
    )


def _hold(ctx: StepContext[ForEachInput]) -> dict[str, Any]:
    return {"customer": ctx.input.customer_id, "line": ctx.index}


class HoldEach(Saga):
    """One TCC hold per line, ten at a time, then a TCC ``check``: refused, the saga rolls
    every hold back (cancels); accepted, it confirms every hold (issue 37's paths)."""

    name = "bench_hold_each"
    input_model = ForEachInput
    steps = (
        ForEach("lines", items=_lines, max_concurrency=CONCURRENCY, max_items=MAX_LINES,
                body=(TccStep("hold", "payments", "hold", payload=_hold, deadline=_DEADLINE,
                              rollback_deadline=_DEADLINE),)),
        TccStep("check", "payments", "check", deadline=_DEADLINE, rollback_deadline=_DEADLINE),
    )
