"""Race: first-of-N, or K-of-N with ``quorum``. Losers are undone at once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from coordinator.engine.nodes import base, step
from coordinator.engine.nodes.base import Kind, Progress, Scope
from coordinator.engine.state import StepPhase
from coordinator.engine.tree import CompiledGroup, CompiledNode

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = ["KIND"]


def forward(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    """Every branch starts at once. A branch that fails is undone right away; once
    ``quorum`` branches succeeded, the first ``quorum`` to finish win and every other branch
    is abandoned and undone while the saga goes on (a loser whose reply arrives after the win
    is undone too: it was in flight, so it counts as possibly applied). ``verdicts``
    ``"first_rejection"`` fails the race at the first failed branch; ``"all"`` decides only
    once every branch has finished."""
    state = base.enter(w, node, key, scope)
    if state.phase is StepPhase.SUCCEEDED:
        return Progress.DONE
    if state.phase is StepPhase.FAILED:
        return Progress.FAILED
    inner = base.inner_scope(w, node, key, scope)
    held: list[tuple[CompiledNode, str, Scope]] = []
    done: list[str] = []
    failed = 0
    for branch in node.children:
        bk = inner.key(branch)
        progress = base.forward(w, branch, bk, inner)
        holder = base.holder(w, branch, bk, inner)  # a guard as the branch: its path's node
        if holder is None:
            continue  # a guard's empty path: the branch does not exist for this saga
        held.append(holder)
        if progress is Progress.DONE:
            done.append(holder[1])
        elif progress is Progress.FAILED:
            failed += 1
            _give_up(w, *holder)
    need, total = node.quorum, len(held)
    if node.verdicts == "first_rejection" and failed:
        return _lost(w, key, f"{key}: a branch failed; every one had to agree")
    if node.verdicts == "all" and len(done) + failed < total:
        return Progress.WAITING  # every verdict is heard before the race is decided
    if len(done) >= need:
        winners = sorted(done, key=lambda bk: w.step(bk).completed_seq or 0)[:need]
        for holder in held:
            if holder[1] not in winners:
                _give_up(w, *holder)
        w.update_step(key, winners=winners)
        base.finish(w, key, StepPhase.SUCCEEDED)
        w.note(f"{key}: won by {', '.join(winners)}")
        return Progress.DONE
    if failed > total - need:
        return _lost(w, key, f"{key}: {failed} of {total} branches failed; {need} had to "
                            "succeed")
    return Progress.WAITING


def _lost(w: Work, key: str, reason: str) -> Progress:
    """The race failed (its branches are undone by the rollback this starts)."""
    base.finish(w, key, StepPhase.FAILED)
    w.failed(key, reason)
    return Progress.FAILED


def _give_up(w: Work, branch: CompiledNode, key: str, scope: Scope) -> None:
    """Hand a failed or losing branch to the background undo, while anything under it still
    needs undoing or still sleeps (a branch already undone is not handed over again)."""
    if any(step.needs_undo(spec, w.steps.get(k)) for spec, k, _ in
           base.leaves(w, branch, key, scope)) or base.waiting_below(w, branch, key, scope):
        w.undo_later(key)


def undo(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Progress:
    return base.undo_concurrent(w, children(w, node, key, scope))


def result(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Any:
    """The winner's result; with a quorum above one, the winners' results in win order."""
    winners = (w.step(key).winners or []) if key in w.steps else []
    held = (base.holder(w, *kid) for kid in children(w, node, key, scope))
    by_key = {h[1]: h for h in held if h is not None}
    out = [base.result(w, *by_key[k]) for k in winners if k in by_key]
    return out[0] if node.quorum == 1 and out else out


def edges(node: CompiledGroup) -> Iterable[tuple[str, str, str]]:
    return base.COMPOSITE_EDGES


children = base.static_children
KIND = Kind(forward, undo, result, children, edges)
