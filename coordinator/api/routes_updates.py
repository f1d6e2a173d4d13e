"""Updates: a signal with a validator and an answer. The sender is answered once the saga
applied (or its validator rejected) the update and the transaction committed; the answer of
an update id is stored, so a resend gets it again and it can be fetched by id."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Path

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.models.updates import UPDATE_ID_PATTERN, UpdateOut, UpdateRequest
from coordinator.api.routes_signals import SagaId
from coordinator.store import UpdateAnswer, UpdateNotFound

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses={
    **ERRORS,
    500: {"model": ERRORS[404]["model"],
          "description": "The update's validator or handler broke (`update_failed`)"},
    504: {"model": ERRORS[404]["model"],
          "description": "The saga stayed busy past `wait_seconds` (`update_timed_out`): "
                         "nothing was applied; resend the same id"},
}, tags=["updates"])

Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Ctx = Annotated[Context, Depends(context)]
UpdateName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z_][\w\-]*$",
                                 description="An update the saga's class declares.")]
UpdateIdPath = Annotated[str, Path(min_length=1, max_length=200, pattern=UPDATE_ID_PATTERN,
                                   description="The update id the sender chose.")]


def _out(answer: UpdateAnswer) -> UpdateOut:
    return UpdateOut(saga_id=answer.saga_id, update_id=answer.update_id, name=answer.name,
                     outcome=answer.outcome, result=answer.result, reason=answer.reason,
                     answered_at=answer.answered_at, duplicate=answer.duplicate)


@router.post("/sagas/{saga_id}/updates/{name}", response_model=UpdateOut,
             summary="Send a saga an update and wait for its answer (accepted or rejected)")
async def send_update(saga_id: SagaId, name: UpdateName, body: UpdateRequest, ctx: Ctx,
                      who: Operator) -> UpdateOut:
    answer = await ctx.store.update(saga_id, name, body.payload, update_id=body.update_id,
                                    actor=f"api:{who.name}", wait_s=body.wait_seconds)
    audit.info("update %s saga=%s id=%s by=%s outcome=%s duplicate=%s", name, saga_id,
               answer.update_id, who.name, answer.outcome, answer.duplicate)
    return _out(answer)


@router.get("/sagas/{saga_id}/updates/{name}/{update_id}", response_model=UpdateOut,
            summary="The stored answer of an update id (404 if it was never applied)")
async def get_update(saga_id: SagaId, name: UpdateName, update_id: UpdateIdPath, ctx: Ctx,
                     _: Viewer) -> UpdateOut:
    answer = await ctx.store.update_answer(saga_id, update_id)
    if answer.name != name:
        raise UpdateNotFound(saga_id, update_id)
    return _out(answer)
