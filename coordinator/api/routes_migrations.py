"""Migrations of running sagas: the dry run (``POST /migrations/dry-run``) and the migration
as a durable job of the bulk-repair runner (``POST /migrations``, ``GET /migrations/{id}``)."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Response

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import ApiError, NotFound
from coordinator.api.jobs import JobTooLarge, insert_job, read_job
from coordinator.api.migrations import (
    MIGRATE_VERB,
    DryRunOut,
    DryRunRequest,
    MigrationJobOut,
    MigrationRequest,
    NoMigration,
    declared,
    dry_run,
)
from coordinator.api.models import SagaFilter

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter(responses=ERRORS, tags=["migrations"])

Ctx = Annotated[Context, Depends(context)]


@router.post("/migrations/dry-run", response_model=DryRunOut,
             summary="Which live sagas of a version could move to another, and why not")
async def post_dry_run(body: DryRunRequest, ctx: Ctx,
                       who: Annotated[Principal, Depends(require(Role.OPERATOR))]
                       ) -> DryRunOut:
    try:
        out = await dry_run(ctx.store, body)
    except NoMigration as exc:
        raise ApiError(str(exc), status=422, code="no_migration") from None
    audit.info("migration dry-run %s v%d->v%d by=%s sagas=%d movable=%d", body.saga_type,
               body.from_version, body.to_version, who.name, out.total, out.can_move)
    return out


@router.post("/migrations", status_code=202, response_model=MigrationJobOut,
             summary="Move the live sagas of a version to another, as a durable job")
async def post_migration(body: MigrationRequest, ctx: Ctx, response: Response,
                         who: Annotated[Principal, Depends(require(Role.OPERATOR))]
                         ) -> MigrationJobOut:
    try:
        declared(ctx.store, body)
    except NoMigration as exc:
        raise ApiError(str(exc), status=422, code="no_migration") from None
    async with ctx.store.pool.acquire() as conn:
        try:
            job_id = await insert_job(
                conn, verb=MIGRATE_VERB, reason=body.reason, actor=who.name,
                saga_filter=SagaFilter(saga_type=body.saga_type, version=body.from_version),
                options={"from_version": body.from_version, "to_version": body.to_version},
                max_sagas=body.max_sagas, now=ctx.now(), stuck_ids=())
        except JobTooLarge as exc:
            raise ApiError(str(exc), status=422, code="too_many_sagas") from None
        job = await _job(conn, job_id)
    audit.info("migration job=%s %s v%d->v%d by=%s sagas=%d reason=%r", job_id,
               body.saga_type, body.from_version, body.to_version, who.name, job.total,
               body.reason)
    ctx.wake_jobs()
    response.headers["Location"] = f"/migrations/{job_id}"
    return job


@router.get("/migrations/{job_id:uuid}", response_model=MigrationJobOut, summary="A migration job")
async def get_migration(job_id: Annotated[UUID, Path()], ctx: Ctx,
                        _: Annotated[Principal, Depends(require(Role.VIEWER))]
                        ) -> MigrationJobOut:
    async with ctx.store.pool.acquire() as conn:
        return await _job(conn, job_id)


async def _job(conn: Any, job_id: UUID) -> MigrationJobOut:
    found = await read_job(conn, job_id)
    if found is None or found[0]["verb"] != MIGRATE_VERB:
        raise NotFound(f"no migration job {job_id}", code="job_not_found")
    job, counts, items = found
    options, flt = json.loads(job["options"]), json.loads(job["filter"])
    return MigrationJobOut(
        job_id=job["id"], saga_type=flt["saga_type"], from_version=options["from_version"],
        to_version=options["to_version"], reason=job["reason"], actor=job["actor"],
        status=job["status"], total=job["total"], counts=counts,
        items=[i.model_dump(mode="json") for i in items])
