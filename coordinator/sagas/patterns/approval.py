"""Approval: ask people for a decision, then act on it; nothing happens without a yes.

Version 2 asks through a human task (:class:`~coordinator.language.tasks.HumanTask`): the
request lands in the inbox of the approvers (users and groups), ``quorum`` of ``approvers``
tasks must approve, four eyes keep the requester from approving, and a rejection or the
deadline ends the saga before the action runs. Version 1 asked an approvals service (a
participant whose ``try`` reply came when someone decided); it stays as
:func:`participant_approval_saga` for sagas still running on it, and a version 2 saga given
``migrate_from=`` that class takes them over (see :func:`approval_saga`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from coordinator.language.saga import Migration, Saga, SagaStep, StepContext, TccStep
from coordinator.language.tasks import Approval, HumanTask, approvers, quorum
from coordinator.sagas.patterns.catalog import FORWARD_RETRY, Pattern, build_saga

__all__ = ["APPROVAL", "ApprovalInput", "approval_saga", "participant_approval_saga"]

VERSION = 2


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


def _title(ctx: StepContext[ApprovalInput]) -> str:
    return f"Approve {ctx.input.request_id} for {ctx.input.requester}"


def _summary(ctx: StepContext[ApprovalInput]) -> str:
    return ctx.input.summary


def approval_saga(name: str = "approval", *, version: int = 1, participant: str,
                  action: str, users: tuple[str, ...] = (),
                  groups: tuple[str, ...] = ("approvers",), approvers_needed: int = 1,
                  approvers_asked: int = 1, decision_within: timedelta = timedelta(days=3),
                  action_compensable: bool = True,
                  migrate_from: type[Saga] | None = None) -> type[Saga]:
    """A saga that asks people (``users``, ``groups``) for approval through human tasks and,
    once ``approvers_needed`` of ``approvers_asked`` approved, runs ``action`` on
    ``participant``. The requester may not approve (four eyes); with no decision within
    ``decision_within`` the request is rejected.

    ``migrate_from``: a class built by :func:`participant_approval_saga` (pattern version 1)
    whose running sagas this version takes over: those still waiting for the approvals
    service's answer cannot move (their command is outstanding: let them finish on it), those
    it approved move with the task done (the service's hold is not confirmed by the new
    version: close it there)."""
    task: dict[str, Any] = {"title": _title, "description": _summary, "users": users,
                            "groups": groups, "four_eyes": True, "form": Approval,
                            "timeout": decision_within, "on_timeout": "reject",
                            "due": decision_within}
    if approvers_asked == 1:
        ask: Any = HumanTask("approval", **task)
    else:
        ask = quorum("approval", approvers_needed, *approvers("approver", approvers_asked,
                                                              **task))
    steps = (ask, SagaStep("act", participant, action, payload=_act,
                           compensable=action_compensable, retry=FORWARD_RETRY,
                           description="do what was approved"))
    cls = build_saga("approval", VERSION, name=name, version=version,
                     input_model=ApprovalInput, steps=steps,
                     description=f"Ask for approval, then {action} on {participant}.",
                     migrate_from={} if migrate_from is None else {
                         migrate_from.version: Migration(
                             source=migrate_from, renames={"approve": "approval"},
                             transform=_from_participant, name="approval@1->approval@2")})
    return cls


def _from_participant(state: dict[str, Any]) -> dict[str, Any]:
    """A version 1 saga's approval (a TCC try the approvals service answered) as a completed
    human task; one not yet decided stays pending, so the task opens when it is reached."""
    node = state["steps"].get("approval")
    if node is not None and node["phase"] == "tried":
        node.update(phase="succeeded", result={"outcome": "approve",
                                               "comment": "approved by the approvals service"},
                    attempts={}, budget_from={}, outstanding=None, payload=None)
    elif node is not None and node["phase"] != "pending":
        raise ValueError(f"the approval is {node['phase']}: let the saga finish on version 1")
    return state


def participant_approval_saga(name: str = "approval", *, version: int = 1, participant: str,
                              action: str, approver: str = "approvals",
                              approve_action: str = "approve",
                              decision_within: timedelta = timedelta(days=3),
                              action_compensable: bool = True) -> type[Saga]:
    """Pattern version 1: a saga that asks the participant ``approver`` (an approvals service)
    and, on yes, runs ``action`` on ``participant``."""
    steps = (
        TccStep("approve", approver, approve_action, payload=_ask, deadline=decision_within,
                retry={"max_attempts": 1}, description="wait for a person's decision"),
        SagaStep("act", participant, action, payload=_act, compensable=action_compensable,
                 retry=FORWARD_RETRY, description="do what was approved"),
    )
    return build_saga("approval", 1, name=name, version=version,
                      input_model=ApprovalInput, steps=steps,
                      description=f"Ask {approver} for approval, then {action} on "
                                  f"{participant}.")


APPROVAL = Pattern("approval", VERSION, "ask people for a decision, act only on a yes",
                   [(1, "approve (TCC, one attempt, long deadline) then act (saga step)"),
                    (2, "the approval is a human task (or a quorum of them) with four eyes "
                        "and a deadline; participant_approval_saga keeps version 1, and "
                        "migrate_from= moves its running sagas over")],
                   approval_saga)
