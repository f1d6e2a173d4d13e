"""Bodies of the repair verbs on one saga (retry, skip, compensate, cancel, resolve)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from coordinator.api.models.fields import STRICT, Name, Reason

__all__ = ["CancelRequest", "CompensateRequest", "ResolveRequest", "RetryRequest", "SkipRequest"]


class _Repair(BaseModel):
    model_config = STRICT

    reason: Reason


class RetryRequest(_Repair):
    step: Name | None = Field(default=None, description="Default: the failed/stuck step.")
    payload: dict[str, Any] | None = Field(
        default=None, description="Replaces the command payload of the re-driven phase.")


class SkipRequest(_Repair):
    step: Name | None = None
    result: dict[str, Any] | None = Field(
        default=None, description="Recorded as the skipped step's result.")


class CompensateRequest(_Repair):
    step: Name | None = None
    payload: dict[str, Any] | None = Field(
        default=None, description="Payload of the re-driven cancel/compensation, if any.")


class CancelRequest(_Repair):
    pass


class ResolveRequest(_Repair):
    status: Literal["completed", "compensated"] = Field(
        default="completed", description="The final status the saga is closed with.")
