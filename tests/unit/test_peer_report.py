"""bench.peers' reading of a peer harness's output, its ratios, targets and table, on peer
records as the harnesses print them (tests/unit/peer_records/)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pytest

from bench.peer_report import (
    SHARED,
    evaluate,
    figure,
    median_figures,
    parse_peer_output,
    peer_figures,
    ratios,
    render,
    sagaflow_figures,
)
from bench.peers import add_arguments, plan, resolve_peers
from bench.stack import KAFKA_BROKER
from bench.targets import TARGETS

RECORDS = Path(__file__).parent / "peer_records"


def _record(name: str) -> str:
    return (RECORDS / name).read_text()


def _closed(p50: float, rate: float, cpu: dict[str, float]) -> dict[str, Any]:
    """The shape bench.latency's closed loop returns (what sagaflow_figures reads)."""
    return {"latency_ms": {"p50": p50, "p99": p50 * 2}, "rate": rate, "sagas": 100,
            "statuses": {"completed": 90, "cancelled": 10},
            "costs": {"cpu_ms_per_saga": cpu}}


def _figures() -> dict[str, Any]:
    dtm = {f"{kind}@{c}": peer_figures(parse_peer_output("dtm", _record(f"dtm-{kind}-c{c}.json")))
           for kind in ("tcc", "saga") for c in (1, 16)}
    restate = {"saga@1": peer_figures(parse_peer_output("restate",
                                                        _record("restate-saga-c4.json")))}
    restate["saga@16"] = dict(restate["saga@1"], rate=200.0)
    cpu = {"coordinator1": 5.0, "postgres (stack backends)": 6.0, "kafka broker": 3.0,
           "bench driver (API + polls)": 1.0}
    sagaflow = {"tcc@1": sagaflow_figures(_closed(30.0, 30.0, cpu)),
                "tcc@16": sagaflow_figures(_closed(120.0, 90.0, cpu)),
                "saga@1": sagaflow_figures(_closed(20.0, 45.0, cpu)),
                "saga@16": sagaflow_figures(_closed(100.0, 130.0, cpu)),
                "idle": {"round_trips_per_s": 2.5}}
    return {"sagaflow": sagaflow, "dtm": dtm, "restate": restate}


def test_a_peer_line_is_found_among_log_lines_and_read_into_figures() -> None:
    text = "[run.sh] starting DTM\nnot json {\n" + _record("dtm-tcc-c16.json") + "\n"
    rec = parse_peer_output("dtm", text)
    assert rec["mode"] == "tcc" and rec["concurrency"] == 16
    fig = peer_figures(rec)
    assert fig["rate"] == rec["sagas_per_s"] and fig["p50_ms"] == rec["p50_ms"]
    assert fig["cpu_ms"] == pytest.approx(sum(rec["cpu_ms_per_saga"].values()))
    assert fig["cpu_ms_own"] == fig["cpu_ms"]  # a peer harness shares no server
    assert fig["ok"] is True
    assert peer_figures(dict(rec, errors=2))["ok"] is False


def test_output_without_a_result_line_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="dtm: no JSON result line"):
        parse_peer_output("dtm", "[run.sh] go not found\n{\"other\": 1}\n")


def test_sagaflow_cpu_is_the_whole_stack_broker_and_driver_included() -> None:
    fig = sagaflow_figures(_closed(30.0, 30.0, {"coordinator1": 5.0, "kafka broker": 3.0,
                                               "bench driver (API + polls)": 1.0}))
    assert fig["cpu_ms"] == 9.0 and fig["p50_ms"] == 30.0 and fig["rate"] == 30.0
    assert fig["cpu_ms_own"] == 6.0  # the shared broker left out
    assert SHARED == (KAFKA_BROKER,)
    bad = _closed(30.0, 30.0, {"x": 1.0})
    bad["statuses"] = {"completed": 1, "failed": 1}
    assert sagaflow_figures(bad)["ok"] is False


def test_ratios_are_sagaflow_over_the_peer() -> None:
    figures = _figures()
    r = ratios(figures, "dtm")
    dtm_tcc1 = figures["dtm"]["tcc@1"]
    assert r["tcc@1.p50_ms"] == pytest.approx(30.0 / dtm_tcc1["p50_ms"])
    assert r["tcc@16.cpu_ms"] == pytest.approx(15.0 / figures["dtm"]["tcc@16"]["cpu_ms"])
    assert "tcc@1.p50_ms" not in ratios(figures, "restate")  # Restate runs saga steps only


def test_each_target_holds_or_misses_by_its_own_bound() -> None:
    figures = _figures()
    by_name = {e["name"]: e for e in evaluate(figures)}
    dtm = figures["dtm"]
    tcc1 = by_name["tcc_one_p50_le_dtm"]
    assert tcc1["bound"] == dtm["tcc@1"]["p50_ms"]
    assert tcc1["holds"] is (30.0 <= dtm["tcc@1"]["p50_ms"])
    saga16 = by_name["saga_sixteen_rate_ge_0.6_dtm"]
    assert saga16["bound"] == pytest.approx(0.6 * dtm["saga@16"]["rate"])
    assert saga16["holds"] is (130.0 >= 0.6 * dtm["saga@16"]["rate"])
    assert by_name["idle_lt_5_round_trips_per_s"]["holds"] is True
    assert by_name["saga_sixteen_rate_ge_restate"]["holds"] is False  # 130 < 200
    assert by_name["saga_sixteen_rate_ge_restate"]["stretch"] is True
    # Move sagaflow's figure across the bound and the verdict follows.
    figures["sagaflow"]["tcc@1"]["p50_ms"] = dtm["tcc@1"]["p50_ms"] * 0.5
    assert {e["name"]: e for e in evaluate(figures)}["tcc_one_p50_le_dtm"]["holds"] is True
    figures["sagaflow"]["tcc@1"]["p50_ms"] = dtm["tcc@1"]["p50_ms"] * 1.01
    assert {e["name"]: e for e in evaluate(figures)}["tcc_one_p50_le_dtm"]["holds"] is False


def test_a_target_whose_peer_was_not_run_is_not_measured() -> None:
    figures = _figures()
    del figures["restate"]
    by_name = {e["name"]: e for e in evaluate(figures)}
    assert by_name["saga_one_p50_within_1.5x_restate"]["holds"] is None


def test_every_target_names_a_figure_the_report_measures() -> None:
    figures = _figures()
    for t in TARGETS:
        assert figure(figures, "sagaflow", t.figure) is not None, t
        if t.peer is not None:
            assert figure(figures, t.peer, t.figure) is not None, t


def test_the_table_shows_each_figure_ratio_and_verdict() -> None:
    figures = _figures()
    text = render(figures, evaluate(figures), ["dtm", "restate"])
    lines = text.splitlines()
    assert lines[0].split() == ["figure", "sagaflow", "dtm", "x", "dtm", "restate", "x",
                                "restate"]
    assert any(line.startswith("tcc@16 CPU ms/saga w/o shared") for line in lines)
    row = next(line for line in lines if line.startswith("tcc@16 sagas/s"))
    r = 90.0 / figures["dtm"]["tcc@16"]["rate"]
    assert row.split()[-3:-2] == [f"{r:.2f}"]
    assert "target tcc@16.rate >= dtm's" in text
    assert "MISSED" in text and "holds" in text
    assert "idle DB round trips/s" in text
    only_dtm = render(figures, evaluate(figures), ["dtm"])
    assert "restate" not in only_dtm


def test_medians_of_rounds() -> None:
    a = {"p50_ms": 10.0, "rate": 100.0, "cpu_ms": 5.0, "cpu_ms_own": 4.0, "cpu_split": {"x": 5.0},
         "sagas": 10, "ok": True}
    b = dict(a, p50_ms=30.0, rate=50.0, cpu_split={"x": 7.0}, ok=False)
    c = dict(a, p50_ms=20.0, rate=80.0)
    m = median_figures([a, b, c])
    assert (m["p50_ms"], m["rate"], m["cpu_split"], m["sagas"], m["ok"]) == (
        20.0, 80.0, {"x": 5.0}, 30, False)
    assert math.isclose(m["cpu_ms"], 5.0)


def test_systems_alternate_from_one_measurement_to_the_next() -> None:
    steps = plan(["dtm", "restate"])
    assert [(k, c) for k, c, _ in steps] == [("tcc", 1), ("tcc", 16), ("saga", 1), ("saga", 16)]
    assert steps[0][2] == ["sagaflow", "dtm"] and steps[1][2] == ["dtm", "sagaflow"]
    assert steps[2][2] == ["sagaflow", "dtm", "restate"]
    assert steps[3][2] == ["restate", "dtm", "sagaflow"]


def test_a_missing_peers_dir_or_unknown_peer_is_one_clear_line(tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    monkeypatch.delenv("SAGAFLOW_PEERS_DIR", raising=False)
    with pytest.raises(SystemExit, match=r"peers folder .*nowhere not found: pass --peers-dir"):
        resolve_peers("dtm", tmp_path / "nowhere")
    with pytest.raises(SystemExit, match="unknown peer"):
        resolve_peers("temporal", tmp_path)
    with pytest.raises(SystemExit, match=r"dtm/run\.sh not found"):
        resolve_peers("dtm", tmp_path)
    (tmp_path / "dtm").mkdir()
    (tmp_path / "dtm" / "run.sh").write_text("#!/bin/sh\n")
    monkeypatch.setenv("SAGAFLOW_PEERS_DIR", str(tmp_path))
    assert resolve_peers("dtm", None) == (tmp_path.resolve(), ["dtm"])


def test_python_m_bench_takes_the_peer_options() -> None:
    from bench.__main__ import _parser

    args = _parser().parse_args(["--peers", "dtm,restate", "--peers-dir", "/x", "--rounds", "3"])
    assert (args.peers, args.peers_dir, args.rounds) == ("dtm,restate", Path("/x"), 3)
    assert _parser().parse_args([]).peers is None  # the plain bench stays the plain bench
    p = argparse.ArgumentParser()
    add_arguments(p, standalone=True)
    assert p.parse_args([]).peers == "dtm"
