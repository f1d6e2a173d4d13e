"""Refund: take the goods back into stock, then pay the money back.

Restocking can be undone (a compensation takes the items out again); the payout cannot, so
it runs last, once everything before it succeeded: if it fails for good the restock is
undone, and once it succeeded nothing is rolled back.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from coordinator.language.saga import Saga, SagaStep, StepContext
from coordinator.sagas.patterns.catalog import FORWARD_RETRY, Pattern, build_saga

__all__ = ["REFUND", "RefundInput", "refund_saga"]

VERSION = 1


class RefundInput(BaseModel):
    refund_id: str = Field(min_length=1, max_length=100)
    order_id: str = Field(min_length=1, max_length=100)
    amount_cents: int = Field(gt=0)
    #: ``{sku: quantity}`` returned; empty for a refund without goods.
    returned: dict[str, int] = Field(default_factory=dict)


def _restock(ctx: StepContext[RefundInput]) -> dict[str, Any]:
    return {"refund_id": ctx.input.refund_id, "items": ctx.input.returned}


def _payout(ctx: StepContext[RefundInput]) -> dict[str, Any]:
    return {"refund_id": ctx.input.refund_id, "order_id": ctx.input.order_id,
            "amount": ctx.input.amount_cents}


def _has_goods(ctx: StepContext[RefundInput]) -> bool:
    return bool(ctx.input.returned)


def refund_saga(name: str = "refund", *, version: int = 1, payments: str = "payments",
                inventory: str | None = "inventory") -> type[Saga]:
    """``inventory=None``: money only, no restock step."""
    steps: list[Any] = []
    if inventory is not None:
        steps.append(SagaStep("restock", inventory, "restock", payload=_restock,
                              when=_has_goods, compensable=True, retry=FORWARD_RETRY))
    steps.append(SagaStep("pay_back", payments, "refund", payload=_payout, compensable=False,
                          retry=FORWARD_RETRY))
    return build_saga("refund", VERSION, name=name, version=version, input_model=RefundInput,
                      steps=steps, description="Restock the returned goods, then pay back.")


REFUND = Pattern("refund", VERSION, "restock (undoable), then pay back (final)",
                 [(1, "restock (saga step, skipped without goods) then pay_back "
                      "(not compensable)")], refund_saga)
