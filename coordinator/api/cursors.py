"""The one cursor style of every list in the API: ``?limit=&cursor=`` in,
``{"items": [...], "next_cursor": ...}`` out.

A cursor is opaque to clients: the url-safe base64 of a small JSON with the list's name and
the sort key of the last item returned (keyset pagination, so a page never skips or repeats
rows when others are added meanwhile). A cursor of another list, or a doctored one, is a 400
``invalid_cursor``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import Query

from coordinator.api.errors import BadRequest

__all__ = ["CursorParam", "decode", "encode", "split_page"]

T = TypeVar("T")

#: The ``cursor`` query parameter every list takes.
CursorParam = Annotated[str | None, Query(min_length=1, max_length=500,
                                          description="next_cursor of the previous page")]


def encode(kind: str, *key: str | int) -> str:
    raw = json.dumps({"s": kind, "k": list(key)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(cursor: str, kind: str, size: int) -> list[Any]:
    """The sort key ``cursor`` carries (``size`` values), for the list ``kind``."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
        found, key = data["s"], data["k"]
    except (ValueError, KeyError, TypeError, UnicodeError):
        raise BadRequest(f"invalid cursor {cursor[:80]!r}: pass back a next_cursor unchanged",
                         code="invalid_cursor") from None
    if found != kind:
        raise BadRequest("the cursor belongs to another list or sort order; start again "
                         "without it", code="invalid_cursor")
    if not isinstance(key, list) or len(key) != size:
        raise BadRequest(f"invalid cursor {cursor[:80]!r}: pass back a next_cursor unchanged",
                         code="invalid_cursor")
    return key


def split_page(rows: Sequence[T], limit: int, kind: str,
               key: Callable[[T], tuple[str | int, ...]]) -> tuple[list[T], str | None]:
    """A page of ``limit`` items out of ``limit + 1`` fetched rows, and the cursor of the next
    page (None when there is none)."""
    items = list(rows[:limit])
    more = len(rows) > limit and items
    return items, encode(kind, *key(items[-1])) if more else None
