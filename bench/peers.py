"""``python -m bench.peers --peers dtm[,restate]``: sagaflow side by side with its peers.

Runs each peer's harness (``<peers-dir>/<peer>/run.sh``, which starts what is not running and
prints one JSON line) and sagaflow's latency-phase closed loops on one stack per ``--lanes``
entry (the direct lane, and Kafka alone), one system at a time, for the 3-step TCC saga and
the 3 saga steps at 1 and at 16 in flight, the order of the systems reversed from one
measurement to the next (so a change in the machine's load hits all alike); then sagaflow's
idle stack. Prints the figures, each one's ratio to each peer and which target
(``bench/targets.py``) held, and writes ``bench/results/peers-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.peer_report import (
    PEER_KINDS,
    evaluate,
    median_figures,
    parse_peer_output,
    peer_figures,
    ratios,
    render,
    sagaflow_figures,
)
from bench.stack import REPO, RESULTS
from participant_sdk.event_loop import run as run_on_event_loop

KIND_SAGAS = {"tcc": ("bench_tcc3", 3), "saga": ("bench_steps3", 3)}
PEER_TIMEOUT_S = 900.0


def default_peers_dir() -> Path:
    return Path(os.environ.get("SAGAFLOW_PEERS_DIR") or REPO.parent / "shared" / "peers")


def add_arguments(p: argparse.ArgumentParser, *, standalone: bool) -> None:
    """The side-by-side options (``python -m bench`` adds them too)."""
    g = p.add_argument_group("side by side with peers (bench.peers)")
    g.add_argument("--peers", default="dtm" if standalone else None,
                   help="comma-separated peers to run beside sagaflow: dtm, restate"
                        + ("" if standalone else " (runs bench.peers instead of the phases)"))
    g.add_argument("--peers-dir", type=Path, default=None,
                   help="folder holding <peer>/run.sh (default $SAGAFLOW_PEERS_DIR, "
                        "else ../shared/peers beside the repository)")
    g.add_argument("--peer-n-one", type=int, default=300,
                   help="sagas per peer run at 1 in flight (after the harness's 20 warm-up)")
    g.add_argument("--peer-n-sixteen", type=int, default=1500,
                   help="sagas per peer run at 16 in flight")
    g.add_argument("--rounds", type=int, default=1,
                   help="repeat every measurement; figures are the rounds' medians")
    g.add_argument("--stop-peers", action="store_true",
                   help="stop the peers' processes at the end (run.sh stop)")
    g.add_argument("--lanes", default="direct,kafka",
                   help="how sagaflow's commands travel, comma-separated, one stack each: "
                        "direct (the direct lane, Kafka as recovery) or kafka. The first is "
                        "'sagaflow', checked against the targets; the others are columns "
                        "'sagaflow-<lane>' beside it")


def resolve_lanes(names: str) -> dict[str, bool]:
    """System name -> uses the direct lane, first the one the targets are checked on."""
    lanes = [n.strip() for n in names.split(",") if n.strip()]
    if not lanes or any(n not in ("direct", "kafka") for n in lanes) or len(set(lanes)) != len(
            lanes):
        raise SystemExit(f"--lanes: {names!r}: give direct and/or kafka, each once")
    return {("sagaflow" if i == 0 else f"sagaflow-{lane}"): lane == "direct"
            for i, lane in enumerate(lanes)}


def resolve_peers(names: str, peers_dir: Path | None) -> tuple[Path, list[str]]:
    """The peers folder and the peer names, checked: a clear one-line error if either is off."""
    folder = (peers_dir or default_peers_dir()).resolve()
    peers = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in peers if n not in PEER_KINDS]
    if not peers or unknown:
        raise SystemExit(f"--peers: unknown peer(s) {unknown or names!r}; "
                         f"known: {', '.join(PEER_KINDS)}")
    if not folder.is_dir():
        raise SystemExit(f"peers folder {folder} not found: pass --peers-dir or set "
                         "SAGAFLOW_PEERS_DIR to the folder holding dtm/run.sh")
    for name in peers:
        if not (folder / name / "run.sh").is_file():
            raise SystemExit(f"{folder / name / 'run.sh'} not found (--peers-dir {folder})")
    return folder, peers


async def run_peer(folder: Path, peer: str, kind: str, n: int, concurrency: int
                   ) -> dict[str, Any]:
    """One run of a peer's harness; its JSON record (its stderr logs are kept on failure)."""
    args = [str(folder / peer / "run.sh"), "--n", str(n), "--concurrency", str(concurrency)]
    if peer == "dtm":
        args += ["--mode", kind]
    # On a thread, not the loop's subprocess support: the harness leaves its servers running,
    # and under uvloop the exit of a child whose descendants live on was not always seen.
    try:
        done = await asyncio.to_thread(subprocess.run, args, capture_output=True,
                                       timeout=PEER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{peer}: {' '.join(args)} took over {PEER_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        raise SystemExit(f"{peer}: {' '.join(args)} exited {done.returncode}: "
                         f"{done.stderr.decode(errors='replace').strip()[-500:]}")
    return parse_peer_output(peer, done.stdout.decode(errors="replace"))


def plan(peers: list[str], ours: Sequence[str] = ("sagaflow",)
         ) -> list[tuple[str, int, list[str]]]:
    """(kind, in flight, systems) per measurement; the systems' order reversed each time."""
    steps = []
    flip = False
    for kind in ("tcc", "saga"):
        for concurrency in (1, 16):
            systems = [*ours, *(p for p in peers if kind in PEER_KINDS[p])]
            steps.append((kind, concurrency, systems[::-1] if flip else systems))
            flip = not flip
    return steps


async def run_side_by_side(args: argparse.Namespace, folder: Path, peers: list[str]
                           ) -> dict[str, Any]:
    from bench.latency import _closed, idle_stack
    from bench.runner import ALL_SAGAS, _driver
    from bench.stack import Stack

    smoke = bool(getattr(args, "smoke", False))
    one_s, sixteen_s = (1.0, 1.0) if smoke else (args.one_duration, args.sixteen_duration)
    peer_n = {1: 20 if smoke else args.peer_n_one, 16: 40 if smoke else args.peer_n_sixteen}
    lanes = resolve_lanes(getattr(args, "lanes", "direct,kafka"))
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {s: {} for s in (*lanes, *peers)}
    async with contextlib.AsyncExitStack() as stacks:
        ours = {name: await stacks.enter_async_context(
            Stack(args.postgres, args.kafka, ALL_SAGAS, label=f"peers-{name}", direct=direct))
            for name, direct in lanes.items()}
        stack = ours["sagaflow"]
        for round_ in range(max(1, args.rounds)):
            for kind, conc, systems in plan(peers, list(ours)):
                if round_ % 2:
                    systems = systems[::-1]
                for system in systems:
                    key = f"{kind}@{conc}"
                    print(f"[peers] round {round_ + 1}: {system} {key}", file=sys.stderr,
                          flush=True)
                    if system in ours:
                        await ours[system].vacuum()
                        saga, steps = KIND_SAGAS[kind]
                        closed = await _closed(ours[system], _driver, saga, steps, conc,
                                               0.5 if smoke else 2.0,
                                               one_s if conc == 1 else sixteen_s,
                                               breakdown=False)
                        record = {"closed_loop": closed, "figures": sagaflow_figures(closed)}
                    else:
                        rec = await run_peer(folder, system, kind, peer_n[conc], conc)
                        record = {"record": rec, "figures": peer_figures(rec)}
                    raw[system].setdefault(key, []).append(record)
        idle = await idle_stack(stack, 2.0 if smoke else args.idle_duration,
                                settle=0.5 if smoke else 12.0)
    figures: dict[str, Any] = {
        system: {key: median_figures([r["figures"] for r in runs]) for key, runs in ms.items()}
        for system, ms in raw.items()}
    figures["sagaflow"]["idle"] = {
        "round_trips_per_s": idle["db_round_trips_per_s_total"],
        "transactions_per_s": idle["db_transactions_per_s_total"]}
    return {"figures": figures, "runs": raw, "idle": idle}


async def _stop_peers(folder: Path, peers: list[str]) -> None:
    for peer in peers:
        await asyncio.to_thread(subprocess.run, [str(folder / peer / "run.sh"), "stop"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                timeout=PEER_TIMEOUT_S)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    folder, peers = resolve_peers(args.peers, args.peers_dir)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    results: dict[str, Any] = {
        "name": "peers", "timestamp": stamp, "command": " ".join(argv),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_average_start": os.getloadavg()},
        "peers": peers, "peers_dir": str(folder),
    }
    try:
        results.update(run_on_event_loop(run_side_by_side(args, folder, peers)))
    finally:
        if args.stop_peers:
            asyncio.run(_stop_peers(folder, peers))
    results["machine"]["load_average_end"] = os.getloadavg()
    ours = [s for s in results["figures"] if s.startswith("sagaflow-")]
    results["ratios"] = {p: ratios(results["figures"], p) for p in (*peers, *ours)}
    results["targets"] = evaluate(results["figures"])
    print(render(results["figures"], results["targets"], [*peers, *ours]))
    out = args.output or RESULTS / f"peers-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nJSON: {out}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    p.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"))
    p.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--one-duration", type=float, default=15.0,
                   help="sagaflow's window at 1 in flight, seconds")
    p.add_argument("--sixteen-duration", type=float, default=15.0,
                   help="sagaflow's window at 16 in flight, seconds")
    p.add_argument("--idle-duration", type=float, default=30.0,
                   help="sagaflow's idle window (after 12 s of settling), seconds")
    p.add_argument("--smoke", action="store_true",
                   help="a few seconds per system and tiny counts (a harness check)")
    p.add_argument("--output", type=Path, default=None, help="write the JSON here instead")
    add_arguments(p, standalone=True)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run(_parser().parse_args(argv), ["python -m bench.peers", *argv])


if __name__ == "__main__":
    sys.exit(main())
