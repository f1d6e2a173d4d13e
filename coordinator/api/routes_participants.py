"""``GET /participants``: whether something consumes each participant's commands."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends

from coordinator.api.auth import Principal, Role, require
from coordinator.api.deps import ERRORS, Context, context
from coordinator.api.models.participants import ParticipantOut

__all__ = ["router"]

router = APIRouter(responses=ERRORS)


@router.get("/participants", response_model=list[ParticipantOut], tags=["participants"],
            summary="Participants: live consumers and lag of each command topic")
async def get_participants(ctx: Annotated[Context, Depends(context)],
                           _: Annotated[Principal, Depends(require(Role.VIEWER))]
                           ) -> list[ParticipantOut]:
    """One entry per participant the registered saga types send commands to, from Kafka's
    admin API (asked at most every few seconds, whatever the number of callers)."""
    if ctx.participants is None:
        return []
    return [ParticipantOut(**asdict(h)) for h in await ctx.participants.snapshot()]
