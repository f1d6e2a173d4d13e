"""The bench's leg floors and one-saga timeline (pure helpers of bench/floors.py, breakdown.py)."""

from __future__ import annotations

import pytest

from bench.breakdown import timeline
from bench.floors import LEG_STATEMENTS, leg_floors


def test_leg_floors_sum_the_round_trips_of_each_side() -> None:
    pg = {"begin_ms": 0.1, "statement_ms": 0.2, "commit_ms": 1.0, "commit_unflushed_ms": 0.25,
          "notify_ms": 0.3}
    kafka = {"one_way_ms": 2.0}
    legs = leg_floors(pg, kafka)
    n = LEG_STATEMENTS
    assert legs["relay"] == pytest.approx(
        (n["coordinator_after_lock"] + n["relay_claim"]) * 0.2 + 1.0 + 0.3)
    assert legs["to_participant"] == pytest.approx(2.0 + 0.1)
    assert legs["participant_txn"] == pytest.approx(n["participant"] * 0.2 + 1.0)
    assert legs["to_coordinator"] == pytest.approx(2.0 + 0.1 + n["coordinator_lock"] * 0.2)
    assert legs["hop"] == pytest.approx(legs["relay"] + legs["to_participant"]
                                        + legs["participant_txn"] + legs["to_coordinator"])
    assert legs["coordinator_txn"] + legs["pick_up"] == pytest.approx(legs["relay"])
    # The commit is stamped before its WAL flush: the flush belongs to what follows.
    assert legs["pick_up"] == pytest.approx(0.75 + 0.3 + n["relay_claim"] * 0.2)
    assert legs["participant_commit"] + legs["reply_send"] == pytest.approx(
        legs["participant_txn"])


def test_timeline_shows_the_median_saga_with_every_hop_in_order() -> None:
    def hops(t0: float, span: float) -> list[tuple[float, str, str, float, float | None,
                                                   float, float]]:
        return [(t0 + span / 2, "b", "try", t0 + span / 2 + 0.001, None, t0 + span * 0.8,
                 t0 + span),
                (t0, "a", "try", t0 + 0.002, t0 + 0.003, t0 + 0.004, t0 + span / 2)]

    marks = {"fast": hops(10.0, 0.010), "mid": hops(20.0, 0.020), "slow": hops(30.0, 0.050),
             "partial": hops(40.0, 0.030)[:1]}
    history = {k: [v[-1][0]] for k, v in marks.items()}
    text = timeline(marks, history)
    assert text == ("a.try: c 0.0 r 2.0 b 3.0 p 4.0 a 10.0 | "
                    "b.try: c 10.0 r 11.0 b - p 16.0 a 20.0")
    assert timeline({}, {}) == "-"
