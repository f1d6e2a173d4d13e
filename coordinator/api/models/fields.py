"""Constrained field types every request body shares, so a name or reason is checked alike
everywhere."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field

__all__ = ["STRICT", "Int32", "Name", "Reason", "Text"]

#: Request bodies refuse unknown fields.
STRICT = ConfigDict(extra="forbid")


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


#: The schema says what ``_no_nul`` checks (Postgres text cannot hold NUL).
_NO_NUL = r"^[^\x00]*$"

Text = Annotated[str, Field(pattern=_NO_NUL), AfterValidator(_no_nul)]
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=_NO_NUL),
                 AfterValidator(_no_nul)]
Reason = Annotated[
    str,
    Field(min_length=1, max_length=2000, pattern=r"^[^\x00]*[^\x00\s][^\x00]*$",
          description="Why: recorded in the saga's history with the caller's name."),
    AfterValidator(_no_nul),
]
#: Strict: JSON ``true`` is not the number 1 (the schema says integer).
Int32 = Annotated[int, Field(ge=1, le=2_147_483_647, strict=True)]
