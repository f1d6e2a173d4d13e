"""Side by side with the peers: a peer harness's JSON line read into the figures sagaflow's
latency phase gives, each figure's ratio to the peer, the targets (``bench/targets.py``)
checked, and the table. Pure functions, so a unit test runs them on recorded peer output.

Figures per system and measurement (``tcc@1``, ``tcc@16``, ``saga@1``, ``saga@16``):
``p50_ms``, ``rate`` (sagas/s), ``cpu_ms`` (whole-stack CPU per saga: every process of the
system, its broker and the client that starts the sagas included) and ``cpu_split``.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from bench.targets import TARGETS, Target

MEASURES = ("tcc@1", "tcc@16", "saga@1", "saga@16")
FIELDS = (("p50_ms", "p50 ms", "{:,.1f}"), ("rate", "sagas/s", "{:,.1f}"),
          ("cpu_ms", "CPU ms/saga", "{:,.2f}"),
          ("cpu_ms_own", "CPU ms/saga w/o shared", "{:,.2f}"))
#: sagaflow's CPU lines that belong to a shared server (devstack's Kafka broker serves other
#: runs too): ``cpu_ms_own`` leaves them out; a peer harness shares nothing.
SHARED = ("kafka broker",)
#: Which measurements each peer harness can run (Restate's runs saga steps only).
PEER_KINDS = {"dtm": ("tcc", "saga"), "restate": ("saga",)}


def parse_peer_output(name: str, stdout: str) -> dict[str, Any]:
    """The last JSON object line of a peer harness's output (its logs go to stderr)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "sagas_per_s" in record:
                return record
    raise ValueError(f"{name}: no JSON result line in the harness's output "
                     f"(last lines: {stdout.strip()[-300:]!r})")


def peer_figures(record: dict[str, Any]) -> dict[str, Any]:
    """A peer harness record -> figures; ``ok`` is False if any saga erred or ended wrong."""
    split = {k: float(v) for k, v in (record.get("cpu_ms_per_saga") or {}).items()}
    bad = int(record.get("errors", 0)) + int(record.get("unexpected_outcome", 0))
    cpu = sum(split.values()) if split else math.nan
    return {"p50_ms": float(record["p50_ms"]), "rate": float(record["sagas_per_s"]),
            "cpu_ms": cpu, "cpu_ms_own": cpu, "cpu_split": split,
            "sagas": int(record.get("n", 0)), "ok": bad == 0}


def sagaflow_figures(closed: dict[str, Any]) -> dict[str, Any]:
    """One closed loop of ``bench.latency`` -> figures (CPU: stack, backends, broker, driver)."""
    split = {k: float(v) for k, v in closed["costs"]["cpu_ms_per_saga"].items()}
    statuses = closed.get("statuses", {})
    return {"p50_ms": float(closed["latency_ms"]["p50"]), "rate": float(closed["rate"]),
            "cpu_ms": sum(split.values()),
            "cpu_ms_own": sum(v for k, v in split.items() if k not in SHARED),
            "cpu_split": split, "sagas": int(closed.get("sagas", 0)),
            "ok": set(statuses) <= {"completed", "compensated", "cancelled"}}


def median_figures(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Several rounds of one measurement -> the median of each figure (and ``ok`` of all)."""
    if len(rounds) == 1:
        return dict(rounds[0])
    out: dict[str, Any] = {f: statistics.median(r[f] for r in rounds) for f, _, _ in FIELDS}
    keys = {k for r in rounds for k in r["cpu_split"]}
    out["cpu_split"] = {k: statistics.median(r["cpu_split"].get(k, 0.0) for r in rounds)
                        for k in sorted(keys)}
    out["sagas"] = sum(r["sagas"] for r in rounds)
    out["ok"] = all(r["ok"] for r in rounds)
    return out


def figure(figures: dict[str, Any], system: str, name: str) -> float | None:
    """``figures[system]`` at ``KIND@INFLIGHT.FIELD`` or ``idle.FIELD`` (None if not measured)."""
    measure, _, field = name.rpartition(".")
    value = figures.get(system, {}).get(measure, {}).get(field)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def evaluate(figures: dict[str, Any], targets: tuple[Target, ...] = TARGETS
             ) -> list[dict[str, Any]]:
    """Each target against this run's figures: value, bound, holds (None: a figure missing)."""
    out = []
    for t in targets:
        value = figure(figures, "sagaflow", t.figure)
        base = t.factor if t.peer is None else figure(figures, t.peer, t.figure)
        bound = None if base is None else (base if t.peer is None else t.factor * base)
        holds = None
        if value is not None and bound is not None:
            holds = {"<=": value <= bound, ">=": value >= bound, "<": value < bound}[t.op]
        out.append({"name": t.name, "target": t.describe(), "value": value, "bound": bound,
                    "holds": holds, "stretch": t.stretch, "peer": t.peer})
    return out


def ratios(figures: dict[str, Any], peer: str) -> dict[str, float]:
    """sagaflow's figure / the peer's, for every figure both measured."""
    out = {}
    for measure in MEASURES:
        for field, _, _ in FIELDS:
            r = ratio(figure(figures, "sagaflow", f"{measure}.{field}"),
                      figure(figures, peer, f"{measure}.{field}"))
            if r is not None:
                out[f"{measure}.{field}"] = r
    return out


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def render(figures: dict[str, Any], evaluations: list[dict[str, Any]], peers: list[str]) -> str:
    """The side-by-side table (ratio = sagaflow / peer), then each target and whether it held."""
    head = ["figure", "sagaflow"]
    for p in peers:
        head += [p, f"x {p}"]
    rows = [head]
    for measure in MEASURES:
        for field, label, fmt in FIELDS:
            ours = figure(figures, "sagaflow", f"{measure}.{field}")
            row = [f"{measure} {label}", _cell(ours, fmt)]
            for p in peers:
                theirs = figure(figures, p, f"{measure}.{field}")
                row += [_cell(theirs, fmt), _cell(ratio(ours, theirs), "{:.2f}")]
            if any(c != "-" for c in row[1:]):
                rows.append(row)
    idle = figure(figures, "sagaflow", "idle.round_trips_per_s")
    if idle is not None:
        rows.append(["idle DB round trips/s", f"{idle:.2f}"] + ["", ""] * len(peers))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    for e in evaluations:
        if e["peer"] is not None and e["peer"] not in peers:
            continue
        verdict = {True: "holds", False: "MISSED", None: "not measured"}[e["holds"]]
        detail = ("" if e["value"] is None or e["bound"] is None
                  else f"  ({e['value']:,.2f} vs {e['bound']:,.2f})")
        lines.append(f"target {e['target']:<48} {verdict}{detail}")
    bad = [f"{s} {m}" for s, ms in figures.items() for m, f in ms.items()
           if isinstance(f, dict) and f.get("ok") is False]
    if bad:
        lines.append("WARNING: errors or unexpected outcomes in " + ", ".join(bad))
    return "\n".join(lines)
