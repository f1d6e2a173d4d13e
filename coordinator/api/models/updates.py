"""Bodies of the update routes (``language.updates``): the request, and the answer every
sender of an update id gets (the first time, on a resend, and when fetched by id)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from coordinator.api.models.fields import STRICT

__all__ = ["UPDATE_ID_PATTERN", "UpdateId", "UpdateOut", "UpdateRequest"]

#: Update ids travel in URLs (the answer is fetched by id): letters, digits and ``_.:@-``.
UPDATE_ID_PATTERN = r"^[A-Za-z0-9_.:@\-]+$"
UpdateId = Annotated[str, Field(
    min_length=1, max_length=200, pattern=UPDATE_ID_PATTERN,
    description="Your id for this update: a resend with the same id gets the stored answer "
                "and is never applied twice.")]


class UpdateRequest(BaseModel):
    model_config = STRICT

    update_id: UpdateId
    payload: dict[str, Any] = Field(default_factory=dict,
                                    description="Validated against the update's model.")
    wait_seconds: float = Field(
        default=10.0, gt=0, le=300,
        description="How long to wait for the saga (its row is locked while its worker "
                    "applies something else). Past it: 504 `update_timed_out`, and NOTHING "
                    "was applied: resend the same id.")


class UpdateOut(BaseModel):
    saga_id: UUID
    update_id: str
    name: str
    #: ``accepted``: applied and stored; ``rejected``: the validator said no, nothing applied.
    outcome: Literal["accepted", "rejected"]
    #: Accepted: the update handler's result.
    result: dict[str, Any] | None = None
    #: Rejected: the validator's reason.
    reason: str | None = None
    #: When the saga answered (its transaction's time).
    answered_at: datetime
    #: The answer stored for this id before this call: nothing was applied now.
    duplicate: bool
