"""Render a trace from Jaeger's query API as an SVG timeline (docs/trace.svg).

    python docs/render_trace_svg.py --trace-id <id> [--query http://127.0.0.1:16686] \
        [--with-db] [-o docs/trace.svg]
    python docs/render_trace_svg.py --json trace.json -o docs/trace.svg

The layout is the web UI's (``coordinator.ui.trace.span_rows``): one bar per span, indented
by depth, coloured per service, red for spans with error status.
Database client spans are left out unless ``--with-db`` (they triple the height).
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from html import escape
from pathlib import Path
from typing import Any

from coordinator.ui.trace import span_rows

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
           "#bab0ac"]
ERROR = "#e15759"
ROW, LABEL_W, BAR_W, PAD = 20, 560, 760, 10


def render(data: dict[str, Any], *, with_db: bool = False) -> str:
    view = span_rows(data, with_db=with_db)
    total = view.duration_ms * 1000
    colours = {name: PALETTE[i] for name, i in view.services.items()}
    rows = view.rows
    legend_h = 28
    height = PAD * 2 + legend_h + ROW * (len(rows) + 1)
    width = LABEL_W + BAR_W + PAD * 3
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    x = PAD
    for name, colour in colours.items():
        out.append(f'<rect x="{x}" y="{PAD}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{x + 16}" y="{PAD + 10}">{escape(name)}</text>')
        x += 22 + 7 * len(name)
    out.append(f'<rect x="{x}" y="{PAD}" width="12" height="12" fill="{ERROR}"/>')
    out.append(f'<text x="{x + 16}" y="{PAD + 10}">error</text>')
    top = PAD + legend_h
    out.append(f'<text x="{PAD}" y="{top + 12}" font-weight="bold">span (service: operation)'
               f'</text><text x="{LABEL_W + PAD * 2}" y="{top + 12}" font-weight="bold">'
               f'0 ms</text><text x="{LABEL_W + BAR_W + PAD * 2}" y="{top + 12}" '
               f'text-anchor="end" font-weight="bold">{total / 1000:.0f} ms</text>')
    for i, row in enumerate(rows, start=1):
        y = top + i * ROW
        if i % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{width}" height="{ROW}" fill="#f4f4f4"/>')
        colour = ERROR if row.error else colours[row.service]
        label = f"{row.service}: {row.operation}"
        extra = [row.tags[k] for k in ("saga.step", "saga.phase") if k in row.tags]
        if extra:
            label += f" [{' '.join(map(str, extra))}]"
        out.append(f'<text x="{PAD + row.depth * 12}" y="{y + 14}"'
                   f'{" fill=" + chr(34) + ERROR + chr(34) if row.error else ""}>'
                   f'{escape(label[:90])}</text>')
        bx = LABEL_W + PAD * 2 + row.offset * BAR_W
        bw = max(row.width * BAR_W, 1.5)
        out.append(f'<rect x="{bx:.1f}" y="{y + 4}" width="{bw:.1f}" height="{ROW - 8}" '
                   f'fill="{colour}" rx="2"><title>{escape(label)} '
                   f'{row.duration_ms:.1f} ms</title></rect>')
    out.append("</svg>")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-id")
    parser.add_argument("--json", type=Path, help="a saved /api/traces/{id} response")
    parser.add_argument("--query", default="http://127.0.0.1:16686")
    parser.add_argument("--with-db", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=Path("docs/trace.svg"))
    args = parser.parse_args()
    if args.json:
        raw = json.loads(args.json.read_text())
    else:
        url = f"{args.query}/api/traces/{args.trace_id}"
        with urllib.request.urlopen(url) as resp:
            raw = json.load(resp)
    data = raw["data"][0] if "data" in raw else raw
    args.output.write_text(render(data, with_db=args.with_db))
    print(f"wrote {args.output} ({len(data['spans'])} spans in the trace)")


if __name__ == "__main__":
    main()
