"""A saga type's node tree as server-rendered SVG, with the saga's current states highlighted.

No Mermaid in the browser (5.5 MB of script, and no CDN here). The tree is drawn the way the
engine runs it: a sequence top to bottom, the branches of a parallel group, race or choice
side by side in a labelled frame, a for-each's body once in a frame that says its bounds;
then confirm and the ends. Every step and composite is a ``<g class="state">`` whose
``data-state`` is its node name (or the saga's own state), so the page's CSS colours the
``current`` and ``dead`` ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape

from coordinator.engine.compiled import (
    CompiledGroup,
    CompiledNode,
    CompiledSaga,
    CompiledSleep,
    CompiledStep,
    CompiledTask,
    CompiledWait,
    GroupKind,
    StepKind,
)
from coordinator.ui.story import MARK_TEXT

__all__ = ["state_svg"]

_CHAR_W, _BOX_H, _GAP, _PAD, _HEAD = 7.0, 28, 22, 10, 20
_ENDS = ("completed", "compensated", "cancelled", "dead")
_TITLE = {GroupKind.PARALLEL: "parallel", GroupKind.RACE: "first of",
          GroupKind.CHOICE: "choice", GroupKind.FOREACH: "for each",
          GroupKind.SEQUENCE: "sequence", GroupKind.PATCHED: "version guard",
          GroupKind.CATCH: "catch", GroupKind.LOOP: "loop"}


@dataclass
class _Canvas:
    current: set[str]
    parts: list[str] = field(default_factory=list)
    focus: str | None = None
    #: Node name -> a CSS class of the saga's story (``died``, ``here``, ``undo``, ...).
    marks: Mapping[str, str] = field(default_factory=dict)
    #: Node name -> words added to its label (its mark, or how many sagas are at it).
    notes: Mapping[str, str] = field(default_factory=dict)

    def box(self, name: str, label: str, x: float, y: float, w: float,
            extra: str = "") -> None:
        classes = ["state", *([extra] if extra else []),
                   *(["current"] if name in self.current else []),
                   *(["focus"] if name == self.focus else []),
                   *([f"mark-{self.marks[name]}"] if name in self.marks else [])]
        self.parts.append(
            f'<g class="{" ".join(classes)}" data-state="{escape(name)}">'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{_BOX_H}" rx="6"/>'
            f'<text x="{x + w / 2:.0f}" y="{y + _BOX_H / 2 + 4:.0f}" text-anchor="middle">'
            f"{escape(label)}</text></g>")

    def arrow(self, x1: float, y1: float, x2: float, y2: float, guard: str = "") -> None:
        mid = (y1 + y2) / 2
        self.parts.append(
            f'<path class="edge{" guarded" if guard else ""}" d="M{x1:.0f},{y1:.0f} '
            f'C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}" '
            f'marker-end="url(#arrow)"/>')
        if guard:
            self.parts.append(f'<text class="guard" x="{x2 + 6:.0f}" y="{mid + 4:.0f}">'
                              f"{escape(guard)}</text>")


def _guard(node: CompiledNode) -> str:
    """``when <guard>`` for a step with a guard (drawn on its incoming edge), else ``""``."""
    when = getattr(node, "when", None)
    if when is None:
        return ""
    name = getattr(when, "__name__", "")
    return "when guard" if not name or name == "<lambda>" else f"when {name}"


def _label(node: CompiledStep) -> str:
    if node.child is not None:
        return f"{node.name} · child saga {node.child}"
    undo = "cancel" if node.kind is StepKind.TCC else (
        "compensate" if node.reversible else "no undo")
    return f"{node.name} · {node.participant}.{node.action} · {undo}"


def _title(node: CompiledGroup) -> str:
    text = f"{_TITLE[node.kind]} {node.name}"
    if node.kind is GroupKind.FOREACH:
        text += f" (≤ {node.max_concurrency or 'all'} at once, ≤ {node.max_items} items)"
    if node.kind is GroupKind.RACE:
        text += f" ({node.quorum} of {len(node.children)} win)"
    return text


def _leaf_label(node: CompiledStep | CompiledSleep | CompiledWait | CompiledTask) -> str:
    if isinstance(node, CompiledTask):
        return f"{node.name} · human task"
    if isinstance(node, CompiledSleep):
        return f"{node.name} · sleep"
    if isinstance(node, CompiledWait):
        return f"{node.name} · wait for signal {node.signal}"
    return _label(node)


def _text(node: CompiledStep | CompiledSleep | CompiledWait | CompiledTask,
          notes: Mapping[str, str]) -> str:
    note = notes.get(node.name)
    return f"{_leaf_label(node)} · {note}" if note else _leaf_label(node)


def _size(node: CompiledNode, notes: Mapping[str, str]) -> tuple[float, float]:
    if not isinstance(node, CompiledGroup):
        return max(len(_text(node, notes)) * _CHAR_W + 20, 90), _BOX_H
    kids = _inner(node)
    sizes = [_size(k, notes) for k in kids]
    title_w = len(_title(node)) * _CHAR_W + 2 * _PAD
    if _stacked(node):
        w = max(s[0] for s in sizes)
        h = sum(s[1] for s in sizes) + _GAP * (len(sizes) - 1)
    else:
        w = sum(s[0] for s in sizes) + _GAP * (len(sizes) - 1)
        h = max(s[1] for s in sizes)
    if not node.name:  # the root: no frame
        return w, h
    return max(w + 2 * _PAD, title_w), h + _HEAD + 2 * _PAD


def _inner(node: CompiledGroup) -> tuple[CompiledNode, ...]:
    if node.kind in (GroupKind.FOREACH, GroupKind.LOOP):
        body = node.children[0]
        assert isinstance(body, CompiledGroup)
        return body.children
    return node.children


def _stacked(node: CompiledGroup) -> bool:
    return node.kind in (GroupKind.SEQUENCE, GroupKind.FOREACH, GroupKind.LOOP)


def _draw(c: _Canvas, node: CompiledNode, x: float, y: float) -> None:
    """Draw ``node`` with its top-left corner at (x, y)."""
    w, h = _size(node, c.notes)
    if not isinstance(node, CompiledGroup):
        c.box(node.name, _text(node, c.notes), x, y, w)
        return
    if node.name:
        classes = "frame current" if node.name in c.current else "frame"
        c.parts.append(f'<g class="{classes}" data-node="{escape(node.name)}">'
                       f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" '
                       f'rx="8" fill="none" stroke-dasharray="4 3"/>'
                       f'<text x="{x + _PAD:.0f}" y="{y + 14:.0f}">{escape(_title(node))}'
                       f"</text></g>")
        x, y, w = x + _PAD, y + _HEAD + _PAD, w - 2 * _PAD
    kids = _inner(node)
    if _stacked(node):
        prev: tuple[float, float] | None = None
        for kid in kids:
            kw, kh = _size(kid, c.notes)
            kx = x + (w - kw) / 2
            if prev is not None:
                c.arrow(prev[0], prev[1], kx + kw / 2, y, _guard(kid))
            elif _guard(kid):  # no edge inside the frame leads to it: say it on the box
                c.parts.append(f'<text class="guard" x="{kx:.0f}" y="{y - 3:.0f}">'
                               f"{escape(_guard(kid))}</text>")
            _draw(c, kid, kx, y)
            prev = (kx + kw / 2, y + kh)
            y += kh + _GAP
        return
    for kid in kids:
        kw, _ = _size(kid, c.notes)
        if _guard(kid):
            c.parts.append(f'<text class="guard" x="{x:.0f}" y="{y - 3:.0f}">'
                           f"{escape(_guard(kid))}</text>")
        _draw(c, kid, x, y)
        x += kw + _GAP


def state_svg(definition: CompiledSaga, current: str | Iterable[str] | None = None, *,
              marks: Mapping[str, str] | None = None,
              counts: Mapping[str, int] | None = None, focus: str | None = None) -> str:
    """The SVG markup (trusted: every name is escaped). ``current`` holds machine states
    (``reserve.trying``, ``dead``); their nodes are highlighted. ``marks`` tells a saga's
    story per node (see ``coordinator.ui.story``); ``counts``, how many sagas are at each;
    the node ``focus`` (a human task opened from the inbox) is marked as well."""
    wanted = [current] if isinstance(current, str) else list(current or ())
    notes = {n: MARK_TEXT[m] for n, m in (marks or {}).items()}
    for name, n in (counts or {}).items():
        notes[name] = f"{n} here"
    c = _Canvas({state.split(".")[0] for state in wanted}, marks=dict(marks or {}),
                notes=notes, focus=focus)
    tree_w, tree_h = _size(definition.root, c.notes)
    tcc = any(s.kind is StepKind.TCC for s in definition.steps)
    end_w = 110
    ends_w = len(_ENDS) * end_w + (len(_ENDS) - 1) * _GAP
    width = max(tree_w, ends_w) + 2 * _PAD
    x0 = (width - tree_w) / 2
    _draw(c, definition.root, x0, _PAD)
    y = _PAD + tree_h + _GAP
    last = (width / 2, _PAD + tree_h)
    if tcc:
        c.arrow(*last, width / 2, y)
        c.box("confirming", "confirm every tried TCC step", width / 2 - 120, y, 240)
        last = (width / 2, y + _BOX_H)
        y += _BOX_H + _GAP
    ex = (width - ends_w) / 2
    for end in _ENDS:
        if end == "completed":
            c.arrow(*last, ex + end_w / 2, y)
        c.box(end, end, ex, y, end_w, "dead" if end == "dead" else "terminal")
        ex += end_w + _GAP
    height = y + _BOX_H + _PAD
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="machine" role="img" '
            f'aria-label="node tree of {escape(definition.name)} v{definition.version}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
            f'height="{height:.0f}"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" '
            f'refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>')
    return head + "".join(c.parts) + "</svg>"
