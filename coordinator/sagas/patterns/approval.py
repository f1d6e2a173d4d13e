"""Approval: ask for a decision, then act on it; nothing happens without a yes.

The approver is a participant (an approvals service that puts the request in a person's
inbox): its ``try`` reply comes when someone decides, ``ok`` for yes, ``rejected`` for no, so
its deadline is long. On yes the action runs and the approval is confirmed (closed); on no,
or if the action fails, the approval is cancelled and a done action compensated.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from coordinator.language.saga import Saga, SagaStep, StepContext, TccStep
from coordinator.sagas.patterns.catalog import FORWARD_RETRY, Pattern, build_saga

__all__ = ["APPROVAL", "ApprovalInput", "approval_saga"]

VERSION = 1


class ApprovalInput(BaseModel):
    request_id: str = Field(min_length=1, max_length=100)
    requester: str = Field(min_length=1, max_length=100)
    summary: str = Field(min_length=1, max_length=1000)
    #: What the action gets once approved.
    details: dict[str, Any] = Field(default_factory=dict)


def _ask(ctx: StepContext[ApprovalInput]) -> dict[str, Any]:
    return {"request_id": ctx.input.request_id, "requester": ctx.input.requester,
            "summary": ctx.input.summary}


def _act(ctx: StepContext[ApprovalInput]) -> dict[str, Any]:
    return {"request_id": ctx.input.request_id, **ctx.input.details}


def approval_saga(name: str = "approval", *, version: int = 1, participant: str,
                  action: str, approver: str = "approvals", approve_action: str = "approve",
                  decision_within: timedelta = timedelta(days=3),
                  action_compensable: bool = True) -> type[Saga]:
    """A saga that asks ``approver`` and, on yes, runs ``action`` on ``participant``."""
    steps = (
        TccStep("approve", approver, approve_action, payload=_ask, deadline=decision_within,
                retry={"max_attempts": 1}, description="wait for a person's decision"),
        SagaStep("act", participant, action, payload=_act, compensable=action_compensable,
                 retry=FORWARD_RETRY, description="do what was approved"),
    )
    return build_saga("approval", VERSION, name=name, version=version,
                      input_model=ApprovalInput, steps=steps,
                      description=f"Ask {approver} for approval, then {action} on "
                                  f"{participant}.")


APPROVAL = Pattern("approval", VERSION, "ask for a decision, act only on a yes",
                   [(1, "approve (TCC, one attempt, long deadline) then act (saga step)")],
                   approval_saga)
