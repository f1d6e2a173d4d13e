"""What a catch caught, as its fallback's mappers see it (``ctx.caught``) and the catch
records it, and how a failure is classified into the kinds a ``Catch`` names.

Kept apart from :mod:`catch` so that :mod:`base` (which builds every mapper's context) can ask
without importing a node kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coordinator.engine.tree import (
    CompiledGroup,
    CompiledSleep,
    CompiledStep,
    CompiledTask,
    CompiledWait,
    GroupKind,
)

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["caught_for", "failure_kind"]


def caught_for(w: Work, parent: str | None) -> Mapping[str, Any] | None:
    """The failure caught by the innermost catch whose fallback holds the node whose parent
    is ``parent`` (``None`` outside every fallback). Walks up the parent keys: a catch's
    fallback is always its own sequence (``<catch>.fallback``), so the walk cannot mistake
    the body for it."""
    steps, key = w.steps, parent
    while key is not None:
        state = steps.get(key)
        if state is None:
            return None
        up = state.parent
        if up is not None and state.node.endswith(".fallback"):
            holder = steps.get(up)
            node = w.definition.node(holder.node) if holder is not None else None
            if (holder is not None and isinstance(node, CompiledGroup)
                    and node.kind is GroupKind.CATCH and node.children[1].name == state.node):
                return holder.payload
        key = up
    return None


def failure_kind(w: Work, key: str) -> str:
    """The kind of the failure of the node at ``key`` (one of ``CATCHABLE``)."""
    state = w.steps.get(key)
    if state is None:
        return "node"
    node = w.definition.node(state.node)
    if isinstance(node, CompiledStep):
        kind = state.last_error.kind if state.last_error is not None else "node"
        return "business" if kind == "rejected" else kind
    if isinstance(node, CompiledWait):
        return "timeout"
    if isinstance(node, CompiledTask):
        task = state.payload or {}
        return {"rejected": "business", "expired": "timeout"}.get(task.get("state", ""),
                                                                   "mapper")
    if isinstance(node, CompiledSleep):
        return "mapper"  # its wake-up function raised or gave a naive time
    if state.last_error is not None and state.last_error.kind == "timeout":
        return "timeout"  # the composite's own timeout passed (``engine.timeouts``)
    recorded = (state.payload or {}).get("failure")  # a loop's cap
    if isinstance(recorded, str):
        return recorded
    if node.kind in (GroupKind.CHOICE, GroupKind.FOREACH) and "raised" in (state.note or ""):
        return "mapper"  # a guard or the items function raised on entry
    return "node"
