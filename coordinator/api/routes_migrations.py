"""Migrations of running sagas: the dry run (``POST /migrations/dry-run``)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.errors import ApiError
from coordinator.api.migrations import DryRunOut, DryRunRequest, NoMigration, dry_run

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
