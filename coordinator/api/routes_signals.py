"""Signals and queries: deliver a signal to a saga (or start the saga and deliver it in one
transaction); answer a read-only query on a saga's stored state, taking no lock."""

from __future__ import annotations

import logging
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import NotFound
from coordinator.api.models import Int32, Name
from coordinator.sagas.queries import run_query
from coordinator.store import SignalResult

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS, tags=["signals"])

Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Ctx = Annotated[Context, Depends(context)]
SagaId = Annotated[UUID, Path(description="The saga's id.")]
SignalName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z_][\w\-]*$",
                                 description="A signal the saga's waits declare.")]
SignalId = Annotated[str | None, Field(
    default=None, min_length=1, max_length=200,
    description="Your id for this signal: a resend with the same id is applied once. "
                "Default: a new id (every call is a new signal).")]

_STRICT = ConfigDict(extra="forbid")


class SignalRequest(BaseModel):
    model_config = _STRICT

    signal_id: SignalId = None
    payload: dict[str, Any] = Field(default_factory=dict,
                                    description="Validated against the signal's model.")


class SignalWithStartRequest(BaseModel):
    model_config = _STRICT

    type: Name = Field(description="Registered saga type.")
    version: Int32 | None = None
    saga_id: UUID = Field(description="The saga to signal, started with `input` if absent.")
    input: dict[str, Any]
    signal: Name
    signal_id: SignalId = None
    payload: dict[str, Any] = Field(default_factory=dict)


class SignalOut(BaseModel):
    saga_id: UUID
    signal_id: str
    name: str
    #: That signal id had already been applied: nothing changed.
    duplicate: bool
    #: Signal-with-start created the saga.
    started: bool = False


def _out(result: SignalResult) -> SignalOut:
    return SignalOut(saga_id=result.saga_id, signal_id=result.signal_id, name=result.name,
                     duplicate=result.duplicate, started=result.started)


@router.post("/sagas/{saga_id}/signals/{name}", status_code=202, response_model=SignalOut,
             summary="Send a saga a signal (kept until a wait takes it)")
async def send_signal(saga_id: SagaId, name: SignalName, body: SignalRequest, ctx: Ctx,
                      who: Operator) -> SignalOut:
    result = await ctx.store.signal(saga_id, name, body.payload, signal_id=body.signal_id,
                                    actor=f"api:{who.name}")
    audit.info("signal %s saga=%s id=%s by=%s duplicate=%s", name, saga_id,
               result.signal_id, who.name, result.duplicate)
    return _out(result)


@router.post("/signal-with-start", status_code=202, response_model=SignalOut,
             summary="Start the saga if absent, then signal it, in one transaction")
async def signal_with_start(body: SignalWithStartRequest, ctx: Ctx,
                            who: Operator) -> SignalOut:
    result = await ctx.store.signal_with_start(
        body.type, body.input, body.saga_id, body.signal, body.payload,
        signal_id=body.signal_id, version=body.version, actor=f"api:{who.name}")
    audit.info("signal-with-start %s %s saga=%s id=%s by=%s started=%s", body.type,
               body.signal, body.saga_id, result.signal_id, who.name, result.started)
    return _out(result)


class QueryOut(BaseModel):
    saga_id: UUID
    name: str
    #: The saga's status when the answer was computed.
    status: str
    result: dict[str, Any]


QueryName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z_][\w\-]*$",
                                description="A query the saga's class declares.")]


@router.get("/sagas/{saga_id}/queries/{name}", response_model=QueryOut, tags=["queries"],
            summary="Answer a query declared on the saga's class (no lock, no write)")
async def query_saga(saga_id: SagaId, name: QueryName, ctx: Ctx, _: Viewer) -> QueryOut:
    record = await ctx.store.get_saga(saga_id)  # a plain SELECT: never waits for the row
    if record is None:
        raise NotFound(f"no saga with id {saga_id}", code="saga_not_found")
    definition = ctx.store.definition(record.saga_type, record.version)
    return QueryOut(saga_id=saga_id, name=name, status=record.status,
                    result=run_query(definition, record.state, name))
