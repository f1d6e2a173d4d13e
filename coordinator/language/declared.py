"""Strict with what an operator sends, lenient with what the ``schedules`` table holds.

An unknown field in a request is a typo (``timezon``) and is refused; an unknown field in a
stored row is what a newer build wrote, and is ignored, so that a rollback or a mixed-version
fleet still reads every schedule. Stored rows are validated with ``context=STORED``.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

__all__ = ["STORED", "Declared"]

STORED: Final = {"stored": True}


class Declared(BaseModel):
    """A schedule model: unknown fields refused, except when read back from the table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown_when_stored(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and info.context and info.context.get("stored"):
            return {k: v for k, v in data.items() if k in cls.model_fields}
        return data
