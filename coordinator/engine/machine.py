"""The machine a compiled saga runs, generated from the node modules that run it.

Each node instance moves through its own phases (``reserve.trying`` -> ``reserve.tried``),
by the edges its kind declares; the saga as a whole moves through its statuses by
:data:`SAGA_EDGES`. A property test checks every move the engine makes against both, so the
exported machine and the engine cannot disagree.
"""

from __future__ import annotations

from datetime import timedelta

from coordinator.engine.nodes.base import kind_of
from coordinator.engine.tree import CompiledGroup, CompiledStep, Transition, walk
from coordinator.language.timeouts import human

__all__ = ["END_STATES", "SAGA_EDGES", "build_machine", "node_edges", "saga_timeout_edges",
           "timeout_edges"]

END_STATES = ("completed", "compensated", "cancelled", "dead")

#: Moves of the saga's status (``running`` covers forward and confirm).
SAGA_EDGES = (
    ("scheduled", "running", "its start time came"),
    ("scheduled", "cancelled", "operator cancel before its start"),
    ("running", "completed", "every node done, every confirm acknowledged"),
    ("running", "compensating", "a node failed for good / operator compensate or cancel"),
    ("running", "dead", "a confirm or a loser's undo gave up"),
    ("compensating", "compensated", "everything applied was undone"),
    ("compensating", "cancelled", "undone after an operator cancel"),
    ("compensating", "dead", "an undo gave up / a step cannot be undone"),
    ("dead", "running", "operator retry / skip"),
    ("dead", "compensating", "operator retry / skip / compensate"),
    ("dead", "completed", "operator resolve"),
    ("dead", "compensated", "operator resolve"),
)


def node_edges(node: object) -> tuple[tuple[str, str, str], ...]:
    """The phase moves of one definition node, from its kind's module (and its timeout's)."""
    return tuple(kind_of(node).edges(node)) + timeout_edges(node)  # type: ignore[arg-type]


def timeout_edges(node: object) -> tuple[tuple[str, str, str], ...]:
    """A node's own timeout (``coordinator.engine.timeouts``): ``fail`` fails it where it runs
    (a composite while ``running``, a child saga while ``trying``); ``dead`` parks the saga
    and leaves the node's phase as it is."""
    timeout = getattr(node, "timeout", None)
    if not isinstance(node, CompiledGroup | CompiledStep) or timeout is None:
        return ()
    if node.on_timeout == "dead":
        return ()
    source = "trying" if isinstance(node, CompiledStep) else "running"
    return ((source, "failed", f"timed out after {human(timeout)}"),)


def saga_timeout_edges(timeout: timedelta | None, on_timeout: str) -> tuple[Transition, ...]:
    """The saga's own timeout, labelled, among the saga's status moves."""
    if timeout is None:
        return ()
    target = "dead" if on_timeout == "dead" else "compensating"
    return (Transition("running", target, f"timed out after {human(timeout)} ({on_timeout})"),)


def build_machine(root: CompiledGroup) -> tuple[tuple[str, ...], tuple[Transition, ...]]:
    """Flat states (``<node>.<phase>`` and the saga's own) and every edge between them."""
    states: list[str] = ["start", "scheduled", "running", "prepared", "confirming", "compensating"]
    edges: list[Transition] = []
    for node in walk(root):
        if not node.name:
            continue
        for source, target, label in node_edges(node):
            for state in (f"{node.name}.{source}", f"{node.name}.{target}"):
                if state not in states:
                    states.append(state)
            edges.append(Transition(f"{node.name}.{source}", f"{node.name}.{target}", label))
    states.extend(END_STATES)
    edges.append(Transition("start", "running", "started"))
    edges.append(Transition("start", "scheduled", "started with a later start_at"))
    edges.extend(Transition(s, t, label) for s, t, label in SAGA_EDGES)
    return tuple(states), tuple(edges)
