"""What every node kind shares: progress, scopes, entering and finishing, the undo walks.

A node kind is a :class:`Kind`: ``forward`` (start or continue its work), ``undo`` (roll back
what it applied), ``result``, ``children`` (the child instances that have a state) and
``edges`` (the moves of its phase, for the exported machine). The driver only walks the tree
through :func:`forward` and :func:`undo`; adding a kind touches no other kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from coordinator.engine.nodes.caught import caught_for
from coordinator.engine.state import StepPhase, StepState
from coordinator.engine.tree import CompiledGroup, CompiledNode, CompiledStep, GroupKind
from coordinator.language.saga import StepContext

if TYPE_CHECKING:
    from coordinator.engine.work import Work

__all__ = [
    "COMPOSITE_EDGES",
    "KINDS",
    "ROOT",
    "Kind",
    "Progress",
    "Scope",
    "abandon_wait",
    "children",
    "context",
    "enter",
    "finish",
    "forward",
    "holder",
    "inner_scope",
    "result",
    "scope_of",
    "undo",
    "undo_concurrent",
    "undo_serial",
]

#: Phases in which a step's result is visible to later mappers.
RESULT_PHASES = frozenset({StepPhase.TRIED, StepPhase.CONFIRMED, StepPhase.SUCCEEDED})


class Progress(Enum):
    """Where a node stands after a walk: done, waiting for an event, or failed (undo: the
    saga went dead at a step that cannot be undone)."""

    DONE = "done"
    WAITING = "waiting"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a node instance sits: the key prefix of its for-each item (``"lines[3]."``),
    its parent's key, and the item the mappers see."""

    prefix: str = ""
    parent: str | None = None
    item: Any = None
    index: int | None = None

    def key(self, node: CompiledNode) -> str:
        return self.prefix + node.name


ROOT = Scope()

Walk = Callable[["Work", Any, str, Scope], Progress]


class Kind(NamedTuple):
    forward: Walk
    undo: Walk
    result: Callable[[Work, Any, str, Scope], Any]
    children: Callable[[Work, Any, str, Scope], Iterator[tuple[CompiledNode, str, Scope]]]
    edges: Callable[[Any], Iterable[tuple[str, str, str]]]


#: Filled by ``coordinator.engine.nodes``: node kind value -> its behaviour.
KINDS: dict[str, Kind] = {}

#: Moves of a composite's phase (its children carry the work).
COMPOSITE_EDGES = (
    ("pending", "running", "entered"),
    ("running", "succeeded", "children done"),
    ("running", "failed", "a child failed for good"),
    ("failed", "running", "operator retry"),
)


def kind_of(node: CompiledNode) -> Kind:
    return KINDS[node.kind]  # a StrEnum member finds its value's entry (no ``.value`` lookup)


def forward(w: Work, node: CompiledNode, key: str, scope: Scope) -> Progress:
    return kind_of(node).forward(w, node, key, scope)


def undo(w: Work, node: CompiledNode, key: str, scope: Scope) -> Progress:
    return kind_of(node).undo(w, node, key, scope)


def result(w: Work, node: CompiledNode, key: str, scope: Scope) -> Any:
    return kind_of(node).result(w, node, key, scope)


def children(w: Work, node: CompiledNode, key: str, scope: Scope
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    return kind_of(node).children(w, node, key, scope)


def inner_scope(w: Work, node: CompiledGroup, key: str, scope: Scope) -> Scope:
    """The scope of ``node``'s children: a for-each item opens a new prefix and item."""
    if node.name.endswith("[]"):
        item = w.step(key)
        return Scope(prefix=key + ".", parent=key, item=item.item,
                     index=int(key[key.rindex("[") + 1:-1]))
    return Scope(scope.prefix, key or None, scope.item, scope.index)


def scope_of(w: Work, key: str) -> Scope:
    """Rebuild the scope a node instance sits in from its key (for undo outside a walk)."""
    name = w.step(key).node
    if name.endswith("[]"):  # an item sits where its for-each sits, under it
        owner = key[:key.rindex("[")]
        outer = scope_of(w, owner)
        return Scope(outer.prefix, owner, outer.item, outer.index)
    prefix = key[:len(key) - len(name)]
    parent = w.step(key).parent
    if not prefix:
        return Scope(parent=parent)
    item_key = prefix[:-1]
    return Scope(prefix, parent, w.step(item_key).item,
                 int(item_key[item_key.rindex("[") + 1:-1]))


def enter(w: Work, node: CompiledGroup, key: str, scope: Scope) -> StepState:
    """A composite's state, moved to ``running`` on first entry."""
    state = w.steps.get(key)
    if state is None:
        return w.create(key, node.name, scope.parent, phase=StepPhase.RUNNING,
                        started_at=w.now)
    if state.phase is StepPhase.PENDING:
        w.update_step(key, phase=StepPhase.RUNNING, started_at=w.now)
        return w.step(key)
    return state


def finish(w: Work, key: str, phase: StepPhase) -> None:
    """A composite succeeded or failed; success takes the next completion number."""
    if not key or w.step(key).phase is phase:
        return
    changes: dict[str, Any] = {"phase": phase, "finished_at": w.now}
    if phase is StepPhase.SUCCEEDED:
        changes["completed_seq"] = w.next_completion()
    w.update_step(key, **changes)


def abandon_wait(w: Work, key: str, phase: StepPhase, note: str,
                 why: str = "abandoned: its branch is being undone") -> Progress:
    """Undo of a node that only waits (a sleep, a signal wait): drop its timer, mark it given up
    (``why``: the node's note).

    Nothing was applied, so there is nothing to compensate; a node not waiting is left as is.
    """
    state = w.steps.get(key)
    if state is not None and state.phase is phase:
        if state.timer is not None:
            w.drop_timer(state.timer)
        w.update_step(key, phase=StepPhase.FAILED, timer=None, finished_at=w.now,
                      abandoned=True, note=why)
        w.note(f"{key}: {note}")
    return Progress.DONE


def existing(w: Work, pairs: Iterable[tuple[CompiledNode, str, Scope]]
             ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    """The pairs whose node instance has a state (a version guard has none: always kept)."""
    return ((n, k, s) for n, k, s in pairs if k in w.steps or is_guard(n))


def is_guard(node: CompiledNode) -> bool:
    """A version guard (``Patched``): a node without a state of its own."""
    return isinstance(node, CompiledGroup) and node.kind is GroupKind.PATCHED


def holder(w: Work, node: CompiledNode, key: str, scope: Scope
           ) -> tuple[CompiledNode, str, Scope] | None:
    """The node instance that holds a branch's state: the branch itself or, for a version
    guard that is a branch's sole node (each of its paths is one node), the holder of its
    path's node. ``None``: the guard's path is empty (the branch did not exist for this saga)."""
    if not is_guard(node):
        return node, key, scope
    kids = list(children(w, node, key, scope))
    assert len(kids) <= 1, f"{key}: a guard compiled as a branch has one node per path"
    return holder(w, *kids[0]) if kids else None


def completed_seq(w: Work, node: CompiledNode, key: str, scope: Scope) -> int | None:
    """When the node instance succeeded; a guard: when the last node of its path did
    (``None`` while one of them that ran is unfinished)."""
    if not is_guard(node):
        return w.step(key).completed_seq
    seqs = [completed_seq(w, *kid) for kid in children(w, node, key, scope) if _ran(w, *kid)]
    return None if not seqs or None in seqs else max(s for s in seqs if s is not None)


def _ran(w: Work, node: CompiledNode, key: str, scope: Scope) -> bool:
    """The node instance started (a guard: a node of its path did); a skipped one did not."""
    if is_guard(node):
        return any(_ran(w, *kid) for kid in children(w, node, key, scope))
    return w.step(key).phase not in (StepPhase.PENDING, StepPhase.SKIPPED)


def skipped(w: Work, key: str) -> bool:
    state = w.steps.get(key)
    return state is not None and state.phase is StepPhase.SKIPPED


def static_children(w: Work, node: CompiledGroup, key: str, scope: Scope
                    ) -> Iterator[tuple[CompiledNode, str, Scope]]:
    """The children with a state of a node whose children are fixed by the definition."""
    inner = inner_scope(w, node, key, scope)
    return existing(w, ((c, inner.key(c), inner) for c in node.children))


def last_result(w: Work, kids: Iterable[tuple[CompiledNode, str, Scope]]) -> Any:
    """The result of the last of ``kids`` that ran (skipped ones have none): what a node that
    runs its children in order (a sequence, a guard's path) results in."""
    out = None
    for child, child_key, child_scope in kids:
        if not skipped(w, child_key):
            out = result(w, child, child_key, child_scope)
    return out


def undo_serial(w: Work, kids: Iterable[tuple[CompiledNode, str, Scope]]) -> Progress:
    """Undo one child at a time, in reverse order of completion (unfinished ones first)."""
    def latest_first(kid: tuple[CompiledNode, str, Scope]) -> tuple[int, int]:
        seq = completed_seq(w, *kid)
        return (0, 0) if seq is None else (1, -seq)

    for node, key, scope in sorted(kids, key=latest_first):
        progress = undo(w, node, key, scope)
        if progress is not Progress.DONE:
            return progress
    return Progress.DONE


def undo_concurrent(w: Work, kids: Iterable[tuple[CompiledNode, str, Scope]]) -> Progress:
    """Undo independent branches at once; done when every one is."""
    waiting = False
    for node, key, scope in kids:
        progress = undo(w, node, key, scope)
        if progress is Progress.FAILED:
            return progress
        waiting = waiting or progress is Progress.WAITING
    return Progress.WAITING if waiting else Progress.DONE


def leaves(w: Work, node: CompiledNode, key: str, scope: Scope
           ) -> Iterator[tuple[CompiledStep, str, Scope]]:
    """Every step instance with a state at or below ``key``."""
    if isinstance(node, CompiledStep):
        if key in w.steps:
            yield node, key, scope
        return
    for child, child_key, child_scope in children(w, node, key, scope):
        yield from leaves(w, child, child_key, child_scope)


def waiting_below(w: Work, node: CompiledNode, key: str, scope: Scope) -> bool:
    """A node at or below ``key`` waits on a timer of its own (a sleep): giving the branch up
    must cut it short, or its timer would outlive the branch."""
    if isinstance(node, CompiledGroup):
        return any(waiting_below(w, c, k, s) for c, k, s in children(w, node, key, scope))
    state = w.steps.get(key)
    return state is not None and state.phase.is_deliberate_wait


class Results(Mapping[str, Any]):
    """``ctx.results``: a node's result by name, computed when asked for. Inside a for-each
    item, the item's own nodes answer to their bare names first."""

    def __init__(self, w: Work, scope: Scope) -> None:
        self._w = w
        self._prefix = scope.prefix

    def _find(self, name: str) -> tuple[CompiledNode, str] | None:
        steps = self._w.steps
        for key in ((self._prefix + name) if self._prefix else None, name):
            if key is not None and key in steps:
                return self._w.definition.node(steps[key].node), key
        return None

    def __getitem__(self, name: str) -> Any:
        found = self._find(name)
        if found is None:
            raise KeyError(name)
        node, key = found
        state = self._w.step(key)
        if isinstance(node, CompiledStep):
            if state.phase not in RESULT_PHASES:
                raise KeyError(name)
            return state.result
        if state.phase is not StepPhase.SUCCEEDED:
            raise KeyError(name)
        return result(self._w, node, key, scope_of(self._w, key))

    def __iter__(self) -> Iterator[str]:
        for key in sorted(self._w.steps):
            if key in self:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except KeyError:
            return False
        return True


def context(w: Work, scope: Scope) -> StepContext[Any]:
    """What a guard or mapper sees: a fresh input model (a mapper may not see another's
    edits), the results so far, the for-each item if any, and the event's time."""
    return StepContext(  # read field by field: no copy of the state being built
        saga_id=w.saga_id,
        version=w.get("version"),
        input=w.definition.input_model.model_validate(w.get("input")),
        results=Results(w, scope),
        item=scope.item,
        index=scope.index,
        now=w.now,
        caught=caught_for(w, scope.parent),
        updates={name: dict(u.result) for name, u in w.get("updates").items()},
    )
