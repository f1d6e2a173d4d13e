"""The node states of a saga by key, shared between the states one decision makes of another.

A decision changes a few nodes of a saga that may hold thousands (a for-each of 1,000 items
holds 2,000). Copying the whole mapping per decision made each reply cost O(n). A
:class:`StepMap` is a flat ``base`` dict that no one modifies, plus a small ``delta`` of the
keys changed or added since: a decision copies only the delta, and the delta is folded into a
new base once it has grown to a fraction of it (the copy is then paid once for many
decisions). It reads and iterates exactly as the dict it stands for: keys in insertion order
(a changed key keeps its place, a new key goes last), so nothing that walks the mapping sees
a difference; a walk over every key (already O(n)) flattens it once into a dict it keeps.
Keys are never removed.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, Final

__all__ = ["Editable", "StepMap", "editable"]

#: The delta is folded into a new base once it holds more than this many keys, or a tenth of
#: the base, whichever is more: copying the delta stays cheap, and folding stays rare.
_FOLD_AT: Final = 32


class StepMap(Mapping[str, Any]):
    """``base`` (never modified) overlaid by ``delta`` (never modified once published)."""

    __slots__ = ("_base", "_delta", "_flat", "_len", "memo")

    def __init__(self, base: dict[str, Any], delta: dict[str, Any], length: int) -> None:
        self._base, self._delta, self._len = base, delta, length
        self._flat: dict[str, Any] | None = None
        #: What the walks know about this mapping's for-each items (``engine.quiet``), set by
        #: the decision that made it; not part of the mapping's value.
        self.memo: Any = None

    def flat(self) -> dict[str, Any]:
        """The whole mapping as one dict, made on the first walk over every key and kept (a
        walk is O(n) anyway; this makes it run at a dict's speed). Never modify it."""
        flat = self._flat
        if flat is None:
            flat = self._flat = {**self._base, **self._delta} if self._delta else self._base
        return flat

    def __getitem__(self, key: str) -> Any:
        delta = self._delta
        return delta[key] if key in delta else self._base[key]

    def get(self, key: str, default: Any = None) -> Any:
        delta = self._delta
        if key in delta:
            return delta[key]
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._delta or key in self._base

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[str]:
        return iter(self.flat())

    def items(self) -> ItemsView[str, Any]:
        return self.flat().items()

    def values(self) -> ValuesView[Any]:
        return self.flat().values()

    def keys(self) -> KeysView[str]:
        return self.flat().keys()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and self.flat() == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StepMap({dict(self.items())!r})"


def editable(steps: Mapping[str, Any]) -> Editable:
    """A new mapping equal to ``steps`` that this decision writes into with ``set`` (and
    then publishes: it is never written again). ``steps`` itself is left as it is."""
    if isinstance(steps, StepMap):
        base, delta = steps._base, steps._delta
        if len(delta) <= max(_FOLD_AT, len(base) // 10):
            return Editable(base, dict(delta), steps._len)
        base = {**base, **delta}  # fold: a changed key keeps its place, new ones go last
    else:
        base = dict(steps)
    return Editable(base, {}, len(base))


class Editable(StepMap):
    """A :class:`StepMap` whose delta its decision still writes: ``set`` keeps the length."""

    __slots__ = ()

    def set(self, key: str, value: Any) -> None:
        if key not in self._delta and key not in self._base:
            self._len += 1
        self._delta[key] = value
        self._flat = None  # a walk during the decision sees this write
