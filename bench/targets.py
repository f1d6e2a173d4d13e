"""Issue 40's targets against the peers, as data: ``python -m bench.peers`` reports whether each
holds in its run (never asserted by a test: a shared 2-core machine decides, not the code).

A target compares one sagaflow figure with ``factor`` x the same figure of a peer measured in
the same run (``peer`` None: with ``factor`` itself, an absolute bound). Figures are named
``KIND@INFLIGHT.FIELD``: KIND ``tcc`` (three TCC steps) or ``saga`` (three saga steps),
INFLIGHT 1 or 16, FIELD ``p50_ms``, ``rate`` (sagas/s) or ``cpu_ms`` (whole-stack CPU per
saga: every process of the system, its broker and its initiator included);
``idle.round_trips_per_s`` is sagaflow's idle stack (no peer has it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    figure: str
    #: ``<=`` (lower is better) or ``>=`` / ``<``.
    op: str
    factor: float
    peer: str | None = None
    stretch: bool = False

    def describe(self) -> str:
        bound = f"{self.factor:g}" if self.peer is None else (
            f"{self.peer}'s" if self.factor == 1 else f"{self.factor:g}x {self.peer}'s")
        return f"{self.figure} {self.op} {bound}" + (" (stretch)" if self.stretch else "")


TARGETS: tuple[Target, ...] = (
    Target("tcc_one_p50_le_dtm", "tcc@1.p50_ms", "<=", 1.0, "dtm"),
    Target("tcc_sixteen_rate_ge_dtm", "tcc@16.rate", ">=", 1.0, "dtm"),
    Target("saga_sixteen_rate_ge_0.6_dtm", "saga@16.rate", ">=", 0.6, "dtm"),
    Target("saga_one_p50_within_2x_dtm", "saga@1.p50_ms", "<=", 2.0, "dtm"),
    Target("tcc_cpu_le_dtm", "tcc@16.cpu_ms", "<=", 1.0, "dtm"),
    Target("idle_lt_5_round_trips_per_s", "idle.round_trips_per_s", "<", 5.0),
    Target("saga_one_p50_within_1.5x_restate", "saga@1.p50_ms", "<=", 1.5, "restate",
           stretch=True),
    Target("saga_sixteen_rate_ge_restate", "saga@16.rate", ">=", 1.0, "restate", stretch=True),
)
