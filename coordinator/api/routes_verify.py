"""Replay verification over the API: one saga now, or every saga a filter matches as a durable
job (run by the same runner, on the same tables, as bulk repairs)."""

from __future__ import annotations

import json
import logging
from typing import Annotated
from uuid import UUID

import asyncpg
from fastapi import APIRouter, Depends, Path, Query, Response

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import ApiError, NotFound
from coordinator.api.jobs import JobTooLarge, insert_job, read_job
from coordinator.api.models import VerifyJobOut, VerifyOut, VerifyRequest
from coordinator.api.verification import VERIFY_VERB

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS, tags=["verification"])

Ctx = Annotated[Context, Depends(context)]
Viewer = Annotated[Principal, Depends(require(Role.VIEWER))]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]


@router.get("/sagas/{saga_id}/verify", response_model=VerifyOut,
             summary="Replay the saga's history and compare it with its snapshot")
async def verify_saga(saga_id: Annotated[UUID, Path(description="The saga's id.")], ctx: Ctx,
                      who: Viewer) -> VerifyOut:
    result = await ctx.store.verify(saga_id)  # SagaNotFound -> 404 by the error handler
    audit.info("verify saga=%s by=%s ok=%s", saga_id, who.name, result.ok)
    return VerifyOut(saga_id=result.saga_id, ok=result.ok, from_seq=result.from_seq,
                     replayed_events=result.replayed_events, differences=result.differences)


@router.post("/verifications", status_code=202, response_model=VerifyJobOut,
             summary="Replay-verify every saga a filter matches, as a durable job")
async def post_verification(body: VerifyRequest, ctx: Ctx, who: Operator,
                            response: Response) -> VerifyJobOut:
    if body.filter.is_empty():
        raise ApiError("a verify job needs at least one filter field", status=422,
                       code="empty_filter")
    async with ctx.store.pool.acquire() as conn:
        try:
            job_id = await insert_job(conn, verb=VERIFY_VERB, reason=body.reason,
                                      actor=who.name, saga_filter=body.filter, options={},
                                      max_sagas=body.max_sagas, now=ctx.now(),
                                      stuck_ids=await ctx.stuck_ids(conn))
        except JobTooLarge as exc:
            raise ApiError(str(exc), status=422, code="too_many_sagas") from None
        job = await _verify_job(conn, job_id)
    assert job is not None
    audit.info("verify job=%s by=%s sagas=%d reason=%r", job_id, who.name, job.total,
               body.reason)
    ctx.wake_jobs()
    response.headers["Location"] = f"/verifications/{job_id}"
    return job


@router.get("/verifications/{job_id}", response_model=VerifyJobOut, summary="A verify job")
async def get_verification(
    job_id: Annotated[UUID, Path()], ctx: Ctx, _: Viewer,
    item_limit: Annotated[int, Query(ge=0, le=10_000)] = 1000,
    after_position: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> VerifyJobOut:
    async with ctx.store.pool.acquire() as conn:
        job = await _verify_job(conn, job_id, item_limit=item_limit,
                                after_position=after_position)
    if job is None:
        raise NotFound(f"no verify job {job_id}", code="job_not_found")
    return job


async def _verify_job(conn: asyncpg.Connection, job_id: UUID, *, item_limit: int = 1000,
                      after_position: int = 0) -> VerifyJobOut | None:
    found = await read_job(conn, job_id, item_limit=item_limit, after_position=after_position)
    if found is None or found[0]["verb"] != VERIFY_VERB:
        return None
    job, counts, items = found
    return VerifyJobOut(
        job_id=job["id"], reason=job["reason"], actor=job["actor"],
        filter=json.loads(job["filter"]), status=job["status"], total=job["total"],
        counts=counts, created_at=job["created_at"], started_at=job["started_at"],
        finished_at=job["finished_at"], items=items,
    )
