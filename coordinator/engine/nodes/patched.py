"""A version guard (``flow.Patched``): the new or the old path, decided once per saga.

The guard has no state of its own, so its nodes keep the keys and parents they had before the
guard was written, and a saga started on the class without the guard runs on unchanged. The
decision lives in ``SagaState.patches`` (one per change id) and in the history note; replay
is handed the recorded decisions (``Work.known_patches``) so that it takes the same path even
where the rule, applied early, would pick another one. A guard that is a branch's only node is
the branch (see ``compiled._sole_guard``), so the old path keeps the branch's keys too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from coordinator.engine.nodes import base
from coordinator.engine.nodes.base import Kind, Progress, Scope
from coordinator.engine.state import PatchChoice, StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledNode, GroupKind, walk

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND", "decide_path"]


def decide_path(w: Work, node: CompiledGroup) -> PatchChoice:
    """The rule for a saga that has no decision yet: old if it already ran a node of the old
    path or a node after the guard (it passed this point on the old code), else new. Every
    instance counts, each for-each item's and each guard's of the same change: a saga takes
    one path, so that its rollback undoes, and replay runs, what it ran."""
    guards = (g for g in walk(w.definition.root) if isinstance(g, CompiledGroup)
              and g.kind is GroupKind.PATCHED and g.change == node.change)
    names = {n.name for guard in guards
             for top in (*guard.path("old"), *_later_siblings(w, guard)) for n in walk(top)}
    passed = any(s.node in names and s.phase is not StepPhase.PENDING
                 for s in w.steps.values())
    return "old" if passed else "new"


def _later_siblings(w: Work, node: CompiledNode) -> tuple[CompiledNode, ...]:
    """The nodes that run after ``node`` in its sequence; on a guard's path, the rest of the
    path, then the nodes after that guard."""
    parent = w.definition.node(w.definition.parents[node.name])
    if not isinstance(parent, CompiledGroup):
        return ()
    if parent.kind is GroupKind.PATCHED:
        path = next(p for p in (parent.path("new"), parent.path("old"))
                    if any(c is node for c in p))
        rest = path[[c.name for c in path].index(node.name) + 1:]
        return (*rest, *_later_siblings(w, parent))
    if parent.kind is not GroupKind.SEQUENCE:
        return ()  # a branch of a parallel or a race: nothing runs after it in its branch
    return parent.children[parent.children.index(node) + 1:]


def choice_of(w: Work, node: CompiledGroup) -> PatchChoice | None:
    patches: dict[str, PatchChoice] = w.get("patches")
    return patches.get(node.change)


def forward(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    choice = choice_of(w, node) or _decide(w, node, scope)
    for child in node.path(choice):
        progress = base.forward(w, child, scope.key(child), scope)
        if progress is not Progress.DONE:
            return progress
    return Progress.DONE


def _decide(w: Work, node: CompiledGroup, scope: Scope) -> PatchChoice:
    """Decide and record; replay takes the recorded decision. A change without one was never
    reached by a walk on the guarded code (that walk records it), so what replay reaches here
    ran on the code before the guard: the old path, left unrecorded as the saga left it (a
    parallel that finished on the old code is not walked again, and its guards stay undecided)."""
    known = w.known_patches
    if known is not None and node.change not in known:
        return "old"
    choice = known[node.change] if known is not None else decide_path(w, node)
    w.update(patches={**w.get("patches"), node.change: choice})
    w.note(f"patch {node.change}: {choice} path")
    return choice


def children(w: Work, node: CompiledGroup, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    """The nodes of the path taken; while undecided, of the old path: a saga whose walk has
    not reached the guard since it was written ran nothing of the new path, but it may have
    run the old one (a parallel it finished on the old code is not walked again), and its
    rollback must undo that."""
    choice = choice_of(w, node) or "old"
    return base.existing(w, ((c, scope.key(c), scope) for c in node.path(choice)))


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    return base.undo_serial(w, children(w, node, key, scope))


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    """The result of the last node of the path taken that ran."""
    return base.last_result(w, children(w, node, key, scope))


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return ()  # no phase of its own: both paths' nodes are in the machine


KIND = Kind(forward, undo, result, children, edges)
