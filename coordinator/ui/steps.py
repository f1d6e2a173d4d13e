"""The step list of a saga drawn as a tree: nested keys (``ship[3].charge``) under their parent.

Works on the API's ``steps`` data as it is (a flat list of dicts), so it keeps working when the
engine's node tree adds kinds: a step's ``parent`` key wins; without one, the longest prefix of
its key that is itself a step (cut at ``.`` or ``[``) is the parent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["StepRow", "step_tree"]

_CUT = re.compile(r"[.\[]")
#: Step phases with a command in flight or a retry pending (the engine's active phases).
_IN_FLIGHT = frozenset({"trying", "executing", "confirming", "cancelling", "compensating"})


@dataclass(frozen=True, slots=True)
class StepRow:
    depth: int
    step: Mapping[str, Any]
    #: Seconds from start to finish, or (``running``) how long its phase in flight has run.
    seconds: float | None
    running: bool = False


def _prefixes(key: str) -> list[str]:
    """Proper prefixes of ``key`` at ``.``/``[`` boundaries, longest first."""
    return [key[: m.start()] for m in reversed(list(_CUT.finditer(key))) if m.start() > 0]


def _parent(step: Mapping[str, Any], keys: set[str]) -> str | None:
    given = step.get("parent")
    if isinstance(given, str) and given in keys and given != step["key"]:
        return given
    return next((p for p in _prefixes(str(step["key"])) if p in keys), None)


def _row(depth: int, step: Mapping[str, Any], now: datetime | None) -> StepRow:
    start, changed = step.get("started_at"), step.get("phase_changed_at")
    if now is not None and step.get("phase") in _IN_FLIGHT and isinstance(changed, datetime):
        # A phase in flight (a try, or a cancel after the try finished): time in that phase.
        return StepRow(depth, step, max((now - changed).total_seconds(), 0.0), running=True)
    end = step.get("finished_at") or changed
    if isinstance(start, datetime) and isinstance(end, datetime):
        return StepRow(depth, step, max((end - start).total_seconds(), 0.0))
    return StepRow(depth, step, None)


def step_tree(steps: Sequence[Mapping[str, Any]], now: datetime | None = None
              ) -> list[StepRow]:
    """Rows in depth-first order, children after their parent, siblings in the given order;
    with ``now``, a step still running shows how long it has been running."""
    keys = {str(s["key"]) for s in steps}
    children: dict[str | None, list[Mapping[str, Any]]] = {}
    for step in steps:
        children.setdefault(_parent(step, keys), []).append(step)
    rows: list[StepRow] = []
    seen: set[str] = set()

    def walk(parent: str | None, depth: int) -> None:
        for step in children.get(parent, []):
            key = str(step["key"])
            if key in seen:
                continue
            seen.add(key)
            rows.append(_row(depth, step, now))
            walk(key, depth + 1)

    walk(None, 0)
    # A parent cycle (not produced by the engine) would hide steps: show them at the root.
    rows.extend(_row(0, s, now) for s in steps if str(s["key"]) not in seen)
    return rows
