"""Pure-core cost per reply of a for-each of TCC items on every path (issue 37): forward
(the tries), confirm, rollback (the cancels) and repair (each cancel refused for good once,
the saga dead there, an operator retry, the cancel again).

The saga is ``bench.foreach_sagas:HoldEach`` (ten items in flight), driven in memory through
``advance`` (``coordinator.engine.simulate.Simulator``); each figure is the CPU time of the
``advance`` calls of that path's events (replies, and the operator's retries on the repair
path) divided by their number. ``bench.foreach_cost`` prints them beside its own figures.

The core runs under the worker's garbage-collector thresholds (``coordinator worker`` calls
``tune_gc``, as ``bench.timers`` does): at CPython's defaults, the Simulator's history of a
1,000-item saga, kept in memory as no coordinator keeps it, sets off collections that the
10-item sagas (freed one by one) never do. ``gc_thresholds=None`` leaves the defaults.
"""

from __future__ import annotations

import gc
import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Any

from bench.foreach_sagas import CONCURRENCY, HoldEach
from coordinator.config.gc_tuning import WORKER_GC_THRESHOLDS, tune_gc
from coordinator.engine import compile_saga
from coordinator.engine.simulate import Simulator
from participant_sdk.protocol import ErrorKind, Outcome, Phase

__all__ = ["PATHS", "measure_paths", "render_paths"]

PATHS = ("forward", "confirm", "rollback", "repair")
#: The phase whose replies each path times.
_TIMED = {"forward": Phase.TRY, "confirm": Phase.CONFIRM, "rollback": Phase.CANCEL,
          "repair": Phase.CANCEL}


def _input(size: int, i: int) -> dict[str, Any]:
    return {"customer_id": f"c-{i}", "amount_cents": 100, "sku": f"SKU-{i}", "quantity": 1,
            "address": "1 Main St", "lines": size}


def run_path(path: str, size: int, sagas: int) -> tuple[float, int, int, float]:
    """(CPU seconds, events timed, most commands one decision sent, CPU seconds of the events
    that opened the path) for ``sagas`` sagas of ``size`` items on ``path``.

    The opening event sends the path's first ``CONCURRENCY`` commands (forward: the start;
    the others: ``check``'s try reply); with 10 items it sends them all, so the replies timed
    then start nothing, where each reply of a longer for-each starts the next item."""
    definition = compile_saga(HoldEach)
    spent, events, burst, opening = 0.0, 0, 0, 0.0
    timed = _TIMED[path]
    for i in range(sagas):
        sim = Simulator(definition, saga_id=uuid.UUID(int=i + 1), check_touched=False)
        c0 = time.process_time()
        sim.start(_input(size, i))
        if path == "forward":
            opening += time.process_time() - c0
        refused_once: set[str] = set()
        while sim.pending or sim.current.status.value == "dead":
            if sim.current.status.value == "dead":
                dead = sim.current.dead_step
                c0 = time.process_time()
                decision = sim.repair("retry", step=dead, reason="bench")
                spent += time.process_time() - c0
                events += 1
                burst = max(burst, len(decision.commands))
                continue
            command = next(iter(sim.pending.values()))
            outcome, kind = Outcome.OK, None
            if (command.step == "check" and command.phase is Phase.TRY
                    and path in ("rollback", "repair")):
                outcome, kind = Outcome.REJECTED, ErrorKind.BUSINESS
            elif (path == "repair" and command.phase is Phase.CANCEL
                  and command.step not in refused_once):
                refused_once.add(command.step)
                outcome, kind = Outcome.FAILED, ErrorKind.BAD_COMMAND
            c0 = time.process_time()
            decision = sim.reply_to(command, outcome, kind=kind)
            elapsed = time.process_time() - c0
            burst = max(burst, len(decision.commands))
            if command.phase is timed and command.step != "check":
                spent += elapsed
                events += 1
            elif command.step == "check" and command.phase is Phase.TRY and path != "forward":
                opening += elapsed
            # Kept states, history and commands would grow the heap the GC walks (no
            # coordinator keeps a saga's history in memory).
            sim.decisions.clear()
            sim.history.clear()
            sim.sent.clear()
        want = "completed" if path in ("forward", "confirm") else "compensated"
        if sim.current.status.value != want:
            raise RuntimeError(f"{path}: saga ended {sim.current.status.value}, not {want}")
    return spent, events, burst, opening


def measure_paths(sizes: Sequence[int], replies: int, rounds: int,
                  gc_thresholds: tuple[int, int, int] | None = WORKER_GC_THRESHOLDS
                  ) -> dict[str, Any]:
    """µs per event of each path at each size (median over rounds) and the largest burst of
    commands one decision sent (at most ``CONCURRENCY`` when the bound holds)."""
    before = gc.get_threshold()
    if gc_thresholds is not None:
        tune_gc(gc_thresholds)
    try:
        figures = _measure(sizes, replies, rounds)
    finally:
        if gc_thresholds is not None:
            gc.unfreeze()
            gc.set_threshold(*before)
    return {**figures, "gc_thresholds": list(gc_thresholds or before)}


def _measure(sizes: Sequence[int], replies: int, rounds: int) -> dict[str, Any]:
    run_path("forward", 10, 2)  # warm imports and pydantic's caches
    runs: dict[str, dict[int, list[float]]] = {p: {s: [] for s in sizes} for p in PATHS}
    opened: dict[str, dict[int, list[float]]] = {p: {s: [] for s in sizes} for p in PATHS}
    bursts: dict[str, dict[int, int]] = {p: {} for p in PATHS}
    for _ in range(rounds):
        for size in sizes:
            for path in PATHS:
                spent, events, burst, opening = run_path(path, size, max(1, replies // size))
                runs[path][size].append(spent * 1e6 / max(events, 1))
                opened[path][size].append((spent + opening) * 1e6 / max(events, 1))
                bursts[path][size] = max(burst, bursts[path].get(size, 0))
    return {"sizes": list(sizes), "concurrency": CONCURRENCY,
            "us_per_event": {p: {s: statistics.median(runs[p][s]) for s in sizes}
                             for p in PATHS},
            "us_per_event_opening_included": {
                p: {s: statistics.median(opened[p][s]) for s in sizes} for p in PATHS},
            "largest_burst": bursts}


def render_paths(figures: dict[str, Any]) -> str:
    sizes = figures["sizes"]
    head = f"{'engine only, TCC items: advance CPU µs per event':<52}"
    head += "".join(f"{f'N={s}':>12}" for s in sizes)
    head += "".join(f"{f'{s}/{sizes[0]}':>10}" for s in sizes[1:]) + f"{'burst':>8}"
    lines = [head, "-" * len(head)]
    for key, suffix in (("us_per_event", ""),
                        ("us_per_event_opening_included", ", opening included")):
        for path in PATHS:
            if key not in figures:
                continue
            values = [figures[key][path][s] for s in sizes]
            row = f"{path + suffix:<52}" + "".join(f"{v:>12,.1f}" for v in values)
            row += "".join(f"{(v / values[0] if values[0] else float('nan')):>9.2f}x"
                           for v in values[1:])
            lines.append(row + f"{max(figures['largest_burst'][path].values()):>8}")
    lines.append(f"burst: most commands one decision sent (the bound is "
                 f"{figures['concurrency']} in flight); opening included: plus the event that "
                 "sent the path's first commands; gc thresholds "
                 f"{tuple(figures.get('gc_thresholds', ()))}")
    return "\n".join(lines)
