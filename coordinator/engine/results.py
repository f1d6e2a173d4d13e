"""A node's result, one definition for every reader.

Mappers and guards see ``ctx.results``; queries, ``GET /sagas/{id}/result``, the client and
the test kit see :func:`node_results`. Both ask each node kind's ``result``, so a for-each
gives its list (one entry per item), a race its winner's, a parallel its branches', a choice
its chosen branch's, wherever it is read.
"""

from __future__ import annotations

from typing import Any

from coordinator.engine import nodes  # noqa: F401  (fills the node kinds)
from coordinator.engine.nodes.base import ROOT, Results
from coordinator.engine.state import SagaState
from coordinator.engine.tree import CompiledSaga
from coordinator.engine.work import Work

__all__ = ["node_results"]


def node_results(definition: CompiledSaga, state: SagaState) -> dict[str, Any]:
    """The result of every node that succeeded (a step: its forward phase), by node key."""
    seen = Results(Work(definition, state, state.updated_at), ROOT)
    out: dict[str, Any] = {}
    for key in sorted(state.steps):
        try:
            out[key] = seen[key]
        except KeyError:
            continue  # not succeeded (or not yet): no result
    return out
