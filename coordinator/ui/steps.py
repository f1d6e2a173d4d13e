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


@dataclass(frozen=True, slots=True)
class StepRow:
    depth: int
    step: Mapping[str, Any]
    #: Seconds from start to finish (or to the last phase change while it runs).
    seconds: float | None


def _prefixes(key: str) -> list[str]:
    """Proper prefixes of ``key`` at ``.``/``[`` boundaries, longest first."""
    return [key[: m.start()] for m in reversed(list(_CUT.finditer(key))) if m.start() > 0]


def _parent(step: Mapping[str, Any], keys: set[str]) -> str | None:
    given = step.get("parent")
    if isinstance(given, str) and given in keys and given != step["key"]:
        return given
    return next((p for p in _prefixes(str(step["key"])) if p in keys), None)


def _seconds(step: Mapping[str, Any]) -> float | None:
    start = step.get("started_at")
    end = step.get("finished_at") or step.get("phase_changed_at")
    if isinstance(start, datetime) and isinstance(end, datetime):
        return max((end - start).total_seconds(), 0.0)
    return None


def step_tree(steps: Sequence[Mapping[str, Any]]) -> list[StepRow]:
    """Rows in depth-first order, children after their parent, siblings in the given order."""
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
            rows.append(StepRow(depth, step, _seconds(step)))
            walk(key, depth + 1)

    walk(None, 0)
    # A parent cycle (not produced by the engine) would hide steps: show them at the root.
    rows.extend(StepRow(0, s, _seconds(s)) for s in steps if str(s["key"]) not in seen)
    return rows
