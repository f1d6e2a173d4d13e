"""``python -m bench``: the saga stack's throughput, latency, cost per saga and memory.

Sets up fresh databases and topics, starts the coordinator, the relay and the three
participants as separate processes, measures, prints a table and writes
``bench/results/saga-<timestamp>.json``. ``--smoke`` runs every phase briefly (CI checks the
harness, never the speed). See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from bench.latency import LatencyConfig
from bench.peers import add_arguments as add_peer_arguments
from bench.peers import run as run_peers
from bench.report import render_table
from bench.runner import BenchConfig, run_bench
from bench.stack import RESULTS
from participant_sdk.event_loop import run as run_on_event_loop


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"),
        help="admin DSN; fresh databases are created beside it")
    p.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--smoke", action="store_true",
                   help="every phase for a few seconds with small counts (CI)")
    p.add_argument("--duration", type=float, default=60.0,
                   help="closed-loop measurement window of the end-to-end run, seconds")
    p.add_argument("--open-duration", type=float, default=60.0,
                   help="open-loop (latency) run length, seconds")
    p.add_argument("--rate", type=float, default=100.0, help="open-loop start rate, sagas/s")
    p.add_argument("--extra-rate", type=float, default=50.0,
                   help="a second open-loop rate, sagas/s (0: none)")
    p.add_argument("--scale-duration", type=float, default=30.0,
                   help="closed-loop window of each scale point, seconds")
    p.add_argument("--warmup", type=float, default=5.0, help="closed-loop warm-up, seconds")
    p.add_argument("--concurrency", type=int, default=256, help="closed-loop sagas in flight")
    p.add_argument("--limit-duration", type=float, default=10.0,
                   help="length of each limit measurement, seconds")
    p.add_argument("--pg-concurrency", type=int, default=16,
                   help="connections of the Postgres write-rate limit")
    p.add_argument("--rss-sagas", type=int, default=100_000,
                   help="sagas left waiting mid-saga for the memory figure")
    p.add_argument("--phases", default="limits,latency,e2e,scale,replicas,rss",
                   help="comma-separated subset of limits,latency,e2e,scale,replicas,rss")
    p.add_argument("--one-duration", type=float, default=15.0,
                   help="latency phase: window of the 1-in-flight closed loop, seconds")
    p.add_argument("--sixteen-duration", type=float, default=15.0,
                   help="latency phase: window of the 16-in-flight closed loop, seconds")
    p.add_argument("--latency-open-duration", type=float, default=10.0,
                   help="latency phase: length of each open loop, seconds")
    p.add_argument("--latency-rates", default="50,100",
                   help="latency phase: open-loop rates, sagas/s, comma-separated")
    p.add_argument("--idle-duration", type=float, default=60.0,
                   help="latency phase: idle window (no sagas), seconds")
    p.add_argument("--variant", action="append", default=[], metavar="NAME[:K=V,...]",
                   help="latency phase: one stack per variant, in order; keys: repo=PATH "
                        "(run that checkout's stack code), uvloop=0|1 (the processes' event "
                        "loop: asyncio's or uvloop; default: uvloop when installed), "
                        "direct=1 (the direct lane), "
                        "driver_publishes=0 "
                        "(each saga's first command through a relay), pg_socket_dir=PATH "
                        "(Postgres through its Unix-domain socket in PATH, not TCP), "
                        "any SAGAFLOW_* setting. "
                        "Default: one variant, this checkout")
    p.add_argument("--profile", action="store_true",
                   help="run the end-to-end stack's processes under cProfile (slower)")
    p.add_argument("--name", default="saga", help="results file name prefix")
    p.add_argument("--output", type=Path, default=None, help="write the JSON here instead")
    add_peer_arguments(p, standalone=False)
    return p


def _variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME[:K=V,...]`` -> (name, Stack keyword arguments)."""
    name, _, rest = text.partition(":")
    options: dict[str, Any] = {}
    env: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--variant {text!r}: {item!r} is not KEY=VALUE")
        if key == "repo":
            options["repo"] = Path(value).resolve()
        elif key in ("driver_publishes", "direct"):
            options[key] = value not in ("0", "false", "")
        elif key == "uvloop":  # the processes' event loop (participant_sdk.event_loop)
            env["SAGAFLOW_EVENT_LOOP"] = "asyncio" if value in ("0", "false", "") else "uvloop"
        elif key == "pg_socket_dir":
            options[key] = str(Path(value).resolve())
        elif key.startswith("SAGAFLOW_"):
            env[key] = value
        else:
            raise SystemExit(f"--variant {text!r}: unknown key {key!r}")
    if env:
        options["env"] = env
    return name, options


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.peers:
        return run_peers(args, ["python -m bench", *(sys.argv[1:] if argv is None else argv)])
    latency = LatencyConfig(
        one_s=args.one_duration, sixteen_s=args.sixteen_duration,
        open_s=args.latency_open_duration,
        rates=[float(r) for r in args.latency_rates.split(",") if r],
        idle_s=args.idle_duration)
    if args.smoke:
        latency = LatencyConfig(one_s=1.0, sixteen_s=1.0, open_s=1.0, rates=[20.0],
                                idle_s=2.0, idle_settle_s=0.5, warmup=0.5,
                                back_to_back_pause_s=0.2,
                                floor_samples=10)
    variants = dict(_variant(v) for v in args.variant) or {"this": {}}
    if args.smoke:
        config = BenchConfig(
            postgres=args.postgres, kafka=args.kafka, smoke=True, duration=3.0,
            open_duration=2.0, rate=args.rate, scale_duration=2.0, warmup=1.0,
            concurrency=min(args.concurrency, 64), limit_duration=1.0, pg_concurrency=4,
            rss_sagas=min(args.rss_sagas, 300), extra_rate=0.0,
            phases=args.phases.split(","), profile=False, latency=latency, variants=variants)
    else:
        config = BenchConfig(
            postgres=args.postgres, kafka=args.kafka, smoke=False, duration=args.duration,
            open_duration=args.open_duration, rate=args.rate,
            scale_duration=args.scale_duration, warmup=args.warmup,
            concurrency=args.concurrency, limit_duration=args.limit_duration,
            pg_concurrency=args.pg_concurrency, rss_sagas=args.rss_sagas,
            extra_rate=args.extra_rate,
            phases=args.phases.split(","), profile=args.profile, latency=latency,
            variants=variants)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    results: dict[str, Any] = {
        "name": args.name,
        "timestamp": stamp,
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "config": config.as_json(),
    }
    results.update(run_on_event_loop(run_bench(config)))
    print(render_table(results))
    out = args.output or RESULTS / f"{args.name}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
