"""What a saga's diagram tells: the path taken, where it is or died, what is left to undo, what
was skipped and which undos were null compensations; and how many sagas are at each node.

Marks go by definition node (``lines[3].reserve`` is drawn as ``reserve``); when instances of
one node stand differently, the most urgent mark wins (dead, here, to undo, ...).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final

import asyncpg

from coordinator.engine import SagaState, Stage, Status, StepPhase, StepState
from coordinator.observability.stuck import node_name

__all__ = ["MARK_TEXT", "node_counts", "null_compensation", "saga_marks"]

#: Most urgent first; each mark is a CSS class on the node's box and a word on its label.
_ORDER: Final = ("died", "here", "undo", "failed", "null", "undone", "skipped", "done")
MARK_TEXT: Final = {"died": "died here", "here": "here", "undo": "to undo",
                    "failed": "failed", "null": "null compensation", "undone": "undone",
                    "skipped": "skipped", "done": "done"}
_DONE: Final = frozenset({StepPhase.TRIED, StepPhase.CONFIRMED, StepPhase.SUCCEEDED})
_UNDONE: Final = frozenset({StepPhase.CANCELLED, StepPhase.COMPENSATED, StepPhase.RESOLVED})


def null_compensation(step: StepState) -> bool:
    """Undone although its forward phase never took effect (rejected, known not applied):
    the participant's barrier recorded a null compensation and ran no business code."""
    return (step.phase in (StepPhase.CANCELLED, StepPhase.COMPENSATED)
            and step.completed_seq is None and not step.uncertain)


def _mark(state: SagaState, key: str, step: StepState, reversible: Collection[str]
          ) -> str | None:
    if state.status is Status.DEAD and state.dead_step == key:
        return "died"
    if step.phase.is_active or step.phase.is_deliberate_wait:
        return "here"
    if null_compensation(step):
        return "null"
    if step.phase in _UNDONE:
        return "undone"
    rolling_back = state.stage is Stage.ROLLBACK or (state.status is Status.DEAD
                                                    and state.rollback_outcome is not None)
    if step.phase is StepPhase.SKIPPED or (step.phase is StepPhase.PENDING and (
            state.status.is_terminal or rolling_back)):
        return "skipped"  # its guard said no, or the saga will never reach it
    if step.phase in _DONE:
        return "undo" if rolling_back and step.node in reversible else "done"
    if step.phase is StepPhase.FAILED:
        return "failed"
    if step.phase is StepPhase.RUNNING or step.started_at is not None:
        return "done"
    return None


def saga_marks(state: SagaState, reversible: Collection[str]) -> dict[str, str]:
    """Definition node name -> its mark, for the nodes the saga reached (or skipped);
    ``reversible``: the names of the steps that have an undo."""
    out: dict[str, str] = {}
    for key, step in state.steps.items():
        mark = _mark(state, key, step, reversible)
        if mark is None:
            continue
        node = step.node
        if node not in out or _ORDER.index(mark) < _ORDER.index(out[node]):
            out[node] = mark
    return out


_COUNTS: Final = """
SELECT saga_type, saga_version, k AS key, count(*) AS n
FROM sagas, unnest(active_steps) AS k
WHERE status IN ('scheduled', 'running', 'compensating') GROUP BY 1, 2, 3
UNION ALL
SELECT saga_type, saga_version, snapshot->>'dead_step', count(*)
FROM sagas WHERE status = 'dead' AND snapshot->>'dead_step' IS NOT NULL GROUP BY 1, 2, 3
"""


async def node_counts(conn: asyncpg.Connection) -> dict[tuple[str, int], Mapping[str, int]]:
    """(type, version) -> node name -> sagas in flight at it now (working on it, retrying it,
    or dead at it); read through the partial indexes of in-flight and dead sagas."""
    out: dict[tuple[str, int], dict[str, int]] = {}
    for row in await conn.fetch(_COUNTS):
        nodes = out.setdefault((row["saga_type"], row["saga_version"]), {})
        name = node_name(row["key"])
        nodes[name] = nodes.get(name, 0) + int(row["n"])
    return dict(out)
