"""Bulk repairs: a verb applied to every saga a filter matches, as a durable job."""

from __future__ import annotations

import logging
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Response

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import ApiError, NotFound
from coordinator.api.job_list import list_repair_jobs
from coordinator.api.jobs import JobTooLarge, create_job, get_job
from coordinator.api.models import BulkRepairRequest, RepairJobOut, RepairJobPageOut

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS, tags=["repairs"])

Ctx = Annotated[Context, Depends(context)]


@router.post("/repairs", status_code=202, response_model=RepairJobOut,
             summary="Start a bulk repair job")
async def post_repair(body: BulkRepairRequest, ctx: Ctx, response: Response,
                      who: Annotated[Principal, Depends(require(Role.OPERATOR))]
                      ) -> RepairJobOut:
    if body.filter.is_empty():
        raise ApiError("a bulk repair needs at least one filter field", status=422,
                       code="empty_filter")
    async with ctx.store.pool.acquire() as conn:
        try:
            job_id = await create_job(conn, body, actor=who.name, now=ctx.now(),
                                      stuck_ids=await ctx.stuck_ids(conn))
        except JobTooLarge as exc:
            raise ApiError(str(exc), status=422, code="too_many_sagas") from None
        job = await get_job(conn, job_id)
    assert job is not None
    audit.info("bulk %s job=%s by=%s sagas=%d reason=%r", body.verb.value, job_id, who.name,
               job.total, body.reason)
    ctx.wake_jobs()
    response.headers["Location"] = f"/repairs/{job_id}"
    return job


@router.get("/repairs", response_model=RepairJobPageOut, summary="Bulk repair jobs, newest first")
async def get_repairs(
    ctx: Ctx, _: Annotated[Principal, Depends(require(Role.VIEWER))],
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
) -> RepairJobPageOut:
    async with ctx.store.pool.acquire() as conn:
        return await list_repair_jobs(conn, limit=limit, cursor=cursor)


@router.get("/repairs/{job_id}", response_model=RepairJobOut, summary="A bulk repair job")
async def get_repair(
    job_id: Annotated[UUID, Path()], ctx: Ctx,
    _: Annotated[Principal, Depends(require(Role.VIEWER))],
    item_limit: Annotated[int, Query(ge=0, le=10_000)] = 1000,
    after_position: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> RepairJobOut:
    async with ctx.store.pool.acquire() as conn:
        job = await get_job(conn, job_id, item_limit=item_limit, after_position=after_position)
    if job is None:
        raise NotFound(f"no repair job {job_id}", code="job_not_found")
    return job
