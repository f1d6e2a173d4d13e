"""A saga type's state machine as server-rendered SVG, with the current state highlighted.

No Mermaid in the browser (5.5 MB of script, and no CDN here): states are laid out in layers
by their distance from ``start``, edges drawn as curves, and the page's CSS colours the
``current`` and ``dead`` states. The same states and transitions feed the Mermaid export.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from coordinator.engine.compiled import CompiledSaga, Transition

__all__ = ["Layout", "layout", "state_svg"]

_CHAR_W, _BOX_H, _GAP_X, _GAP_Y, _PAD = 7.2, 28, 28, 64, 16
_TERMINAL = {"completed", "compensated", "cancelled"}


@dataclass(frozen=True, slots=True)
class Box:
    state: str
    x: float
    y: float
    w: float


@dataclass(frozen=True, slots=True)
class Layout:
    boxes: dict[str, Box]
    width: float
    height: float


def _ranks(states: Sequence[str], transitions: Sequence[Transition]) -> dict[str, int]:
    out: dict[str, list[str]] = {}
    for t in transitions:
        out.setdefault(t.source, []).append(t.target)
    rank = {states[0] if "start" not in states else "start": 0}
    queue = deque(rank)
    while queue:
        state = queue.popleft()
        for target in out.get(state, []):
            if target not in rank:
                rank[target] = rank[state] + 1
                queue.append(target)
    # Ends (terminal states and dead) share the last row, so edges into them point down.
    ends = _TERMINAL | {"dead"}
    deepest = max((r for s, r in rank.items() if s not in ends), default=0)
    for state in states:
        if state in ends or state not in rank:  # (nothing is unreachable from start today)
            rank[state] = deepest + 1
    return rank


def layout(states: Sequence[str], transitions: Sequence[Transition]) -> Layout:
    """Boxes per state: one row per rank, states of a row in declaration order."""
    ranks = _ranks(states, transitions)
    rows: dict[int, list[str]] = {}
    for state in states:
        rows.setdefault(ranks[state], []).append(state)
    widths = {s: max(len(s) * _CHAR_W + 20, 60) for s in states}
    row_w = {r: sum(widths[s] for s in ss) + _GAP_X * (len(ss) - 1) for r, ss in rows.items()}
    width = max(row_w.values(), default=0) + 2 * _PAD
    boxes: dict[str, Box] = {}
    for r, row in sorted(rows.items()):
        x = (width - row_w[r]) / 2
        for state in row:
            boxes[state] = Box(state, x, _PAD + r * (_BOX_H + _GAP_Y), widths[state])
            x += widths[state] + _GAP_X
    height = _PAD * 2 + (max(rows, default=0) + 1) * (_BOX_H + _GAP_Y) - _GAP_Y + 30
    return Layout(boxes, width, height)


def _edge(a: Box, b: Box, label: str) -> str:
    if b.y > a.y:
        x1, y1, x2, y2 = a.x + a.w / 2, a.y + _BOX_H, b.x + b.w / 2, b.y
        mid = (y1 + y2) / 2
        path = f"M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}"
    elif b.y == a.y:  # same row: bow below it
        x1, x2, y = a.x + a.w / 2, b.x + b.w / 2, a.y + _BOX_H
        path = f"M{x1:.0f},{y:.0f} C{x1:.0f},{y + 30:.0f} {x2:.0f},{y + 30:.0f} {x2:.0f},{y:.0f}"
    else:  # back to an earlier row (a repair, a retry): loop out on the right side
        x1, y1 = a.x + a.w, a.y + _BOX_H / 2
        x2, y2 = b.x + b.w, b.y + _BOX_H / 2
        bend = max(x1, x2) + 40
        path = f"M{x1:.0f},{y1:.0f} C{bend:.0f},{y1:.0f} {bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
    return (f'<path class="edge" d="{path}" marker-end="url(#arrow)">'
            f"<title>{escape(a.state)} → {escape(b.state)}: {escape(label)}</title></path>")


def state_svg(definition: CompiledSaga, current: str | None = None) -> str:
    """The SVG markup (trusted: every name is escaped)."""
    lay = layout(definition.states, definition.transitions)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="machine" role="img" '
             f'aria-label="state machine of {escape(definition.name)} v{definition.version}" '
             f'viewBox="0 0 {lay.width + 60:.0f} {lay.height:.0f}" '
             f'width="{lay.width + 60:.0f}" height="{lay.height:.0f}">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
             'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
             '<path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>']
    for t in definition.transitions:
        if t.source in lay.boxes and t.target in lay.boxes:
            parts.append(_edge(lay.boxes[t.source], lay.boxes[t.target], t.label))
    for state, box in lay.boxes.items():
        classes = ["state"]
        if state == "dead":
            classes.append("dead")
        if state in _TERMINAL:
            classes.append("terminal")
        if state == current:
            classes.append("current")
        parts.append(
            f'<g class="{" ".join(classes)}" data-state="{escape(state)}">'
            f'<rect x="{box.x:.0f}" y="{box.y:.0f}" width="{box.w:.0f}" height="{_BOX_H}" '
            f'rx="6"/><text x="{box.x + box.w / 2:.0f}" y="{box.y + _BOX_H / 2 + 4:.0f}" '
            f'text-anchor="middle">{escape(state)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)
