"""What a walk already knows about a for-each's items, so a reply costs one item, not the window.

A for-each with ten items in flight used to visit all ten on every reply: each answered
``waiting`` again and changed nothing. A visit of an item is a function of the item's own
node states and of a few saga fields (the kept signals, the branches being undone, the stage
and status, ...): visited again with none of them changed, it answers the same and changes
nothing. So each walk (``forward``, ``confirm``, ``undo``) marks the items it visited with
their answer (waiting or done), and skips a marked item on the next walk, taking its answer;
confirm and undo also mark the item they stopped at, at the bound, so the next walk stops
there without looking under it again.

A mark holds only while nothing it depends on changed: every edit of a node under an item
(:meth:`Quiet.edited`, called by ``Work`` for each node it writes) drops that item's marks,
and any change of a saga field outside :data:`NEUTRAL` drops every mark
(:meth:`Quiet.forget`). The marks travel from one decision to the next on the node mapping
they describe (``StepMap.memo``); a decision copies a set of marks before it writes one, so a
state handed to ``advance`` twice (a retried transaction, replay) finds its marks intact. A
mapping without marks (read from JSON, another definition) is simply walked in full.

``tests/unit/test_quiet_walks.py`` checks that every decision equals the one a full walk
makes, on random trees under random events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["CONFIRM", "DONE", "FORWARD", "IDLE", "NEUTRAL", "UNDO", "WAITING", "WALKS",
           "Marks", "Quiet"]

FORWARD: Final = "forward"
CONFIRM: Final = "confirm"
UNDO: Final = "undo"
WALKS: Final = (FORWARD, CONFIRM, UNDO)

#: Saga fields no visit of an item reads: changing them keeps the marks (a completion's
#: number, the decision's bookkeeping, the armed timeouts, which only ``timeouts`` reads).
NEUTRAL: Final = frozenset({"completions", "updated_at", "events_applied", "timeouts"})

#: An item's mark: its last visit answered waiting, or done; or (confirm and undo) the
#: check at the ``max_concurrency`` bound found nothing in flight under it, and it was left.
WAITING: Final = 1
DONE: Final = 2
IDLE: Final = 3

#: Item index -> its mark.
Marks = dict[int, int]


class Quiet:
    """The marks of one decision: for-each key -> item index -> answer, each for one walk
    (a for-each is walked one way at a time: a mark asked for by another walk starts over)."""

    __slots__ = ("_owned", "definition", "marks", "walks")

    def __init__(self, definition: Any, marks: dict[str, Marks] | None = None,
                 walks: dict[str, str] | None = None) -> None:
        #: The compiled saga the marks were made with (another one walks in full).
        self.definition = definition
        self.marks: dict[str, Marks] = marks if marks is not None else {}
        #: For-each key -> the walk its marks are answers of.
        self.walks: dict[str, str] = walks if walks is not None else {}
        #: The for-each keys whose marks this decision copied (the others are shared with the
        #: state it started from, and never written).
        self._owned: set[str] = set()

    @classmethod
    def inherit(cls, steps: Mapping[str, Any], definition: Any) -> Quiet:
        """The marks ``steps`` carries, for a decision that starts from it."""
        memo = getattr(steps, "memo", None)
        if not isinstance(memo, Quiet) or memo.definition is not definition or not memo.marks:
            return cls(definition)
        return cls(definition, dict(memo.marks), dict(memo.walks))

    def own(self, key: str, walk: str) -> Marks:
        """The marks of the for-each at ``key`` for ``walk``, for this decision to read and
        write (copied on first use)."""
        if self.walks.get(key) != walk:
            self.walks[key] = walk
            marks: Marks = {}
        elif key in self._owned:
            return self.marks[key]
        else:
            marks = dict(self.marks.get(key) or ())
        self.marks[key] = marks
        self._owned.add(key)
        return marks

    def edited(self, key: str) -> None:
        """The node at ``key`` was written: the items it sits under lose their marks."""
        pos = key.find("[")
        while pos != -1:
            close = key.find("]", pos)
            if close == -1:
                return
            owner = key[:pos]
            marks = self.marks.get(owner)
            if marks:
                try:
                    index = int(key[pos + 1:close])
                except ValueError:  # not an item's key: trust nothing
                    self.forget()
                    return
                if index in marks:
                    del self.own(owner, self.walks[owner])[index]
            pos = key.find("[", close)

    def forget(self) -> None:
        """Drop every mark (a saga field a visit may read changed)."""
        for key in list(self.marks):
            if key in self._owned:
                self.marks[key].clear()  # a walk in progress may hold it
            else:
                del self.marks[key]
