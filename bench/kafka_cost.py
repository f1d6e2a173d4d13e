"""``python -m bench.kafka_cost``: what a saga message costs the Kafka broker, in requests.

Starts one stack per ``--variant`` (as ``python -m bench``: ``before:repo=PATH``, settings,
...) with every process's Kafka requests counted by type on the clients' side
(``bench/kafka_requests.py``) and, with ``--broker-jmx``, the broker's own request counters
around each window (``bench/broker_metrics.py``: broker-wide), runs the 3-step TCC saga
closed loop at each ``--inflight`` on each stack in turn (the order reversed each time), then
leaves each stack idle. Prints requests per saga message by type (Produce, Fetch, FetchEmpty =
fetches answered with no record, OffsetCommit, Heartbeat, Metadata, ...), the broker's CPU per
message (the broker is shared with other runs: an upper bound) and the idle requests per second;
writes ``bench/results/kafka-cost-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench import broker_metrics
from bench.measure import _request_deltas
from bench.stack import KAFKA_BROKER, RESULTS, Stack

MAIN_TYPES = ("Produce", "Fetch", "FetchEmpty", "OffsetCommit", "Heartbeat", "Metadata")


async def _idle(stack: Stack, seconds: float) -> dict[str, Any]:
    await asyncio.sleep(2.0)
    a, ta = stack.kafka_requests() or {}, time.monotonic()
    await asyncio.sleep(seconds)
    b, tb = stack.kafka_requests() or {}, time.monotonic()
    deltas = _request_deltas(a, b) or {}
    by_type: dict[str, float] = {}
    for counts in deltas.values():
        for kind, n in counts.items():
            by_type[kind] = by_type.get(kind, 0) + n / (tb - ta)
    return {"window_s": tb - ta, "per_s": dict(sorted(by_type.items())),
            "per_s_total": sum(v for k, v in by_type.items() if k != "FetchEmpty")}


def _summary(closed: dict[str, Any]) -> dict[str, Any]:
    costs = closed["costs"]
    req = costs["kafka_requests"]
    broker_ms = costs["cpu_ms_per_saga"].get(KAFKA_BROKER)
    per_saga_msgs = costs["kafka_per_saga"]["total"]
    return {"rate": closed["rate"], "p50_ms": closed["latency_ms"]["p50"],
            "messages_per_saga": per_saga_msgs, "requests": req,
            "broker_cpu_ms_per_message": None if broker_ms is None or not per_saga_msgs
            else broker_ms / per_saga_msgs}


async def measure(args: argparse.Namespace, variants: dict[str, dict[str, Any]]
                  ) -> dict[str, Any]:
    from bench.latency import _closed
    from bench.runner import ALL_SAGAS, _driver

    out: dict[str, Any] = {name: {"inflight": {}} for name in variants}
    async with contextlib.AsyncExitStack() as exits:
        stacks = {name: await exits.enter_async_context(Stack(
            args.postgres, args.kafka, ALL_SAGAS, label=f"kafka-cost-{name}", count_kafka=True,
            **options)) for name, options in variants.items()}
        order = list(stacks)
        for conc in args.inflight:
            for name in order:
                await stacks[name].vacuum()
                before = await _broker(args)
                closed = await _closed(stacks[name], _driver, args.saga, 3, conc, 2.0,
                                       args.duration, breakdown=False)
                out[name]["inflight"][str(conc)] = {
                    **_summary(closed), "broker": await _broker_delta(args, before)}
            order.reverse()
        for name in order:
            before, start = await _broker(args), time.monotonic()
            out[name]["idle"] = await _idle(stacks[name], args.idle)
            out[name]["idle"]["broker"] = await _broker_delta(args, before, start)
    return out


async def _broker(args: argparse.Namespace) -> broker_metrics.BrokerCounts | None:
    if args.broker_jmx is None:
        return None
    return await asyncio.to_thread(broker_metrics.read, args.broker_jmx)


async def _broker_delta(args: argparse.Namespace, before: broker_metrics.BrokerCounts | None,
                        start: float | None = None) -> dict[str, Any] | None:
    """The broker's requests since ``before``: per message produced, or per second since
    ``start`` (an idle window)."""
    after = await _broker(args)
    if before is None or after is None:
        return None
    delta = after.minus(before)
    if start is not None:
        seconds = time.monotonic() - start
        return {"per_s": {k: v / seconds for k, v in sorted(delta.requests.items())},
                "messages_in": delta.messages_in}
    return {"per_message": delta.per_message(), "messages_in": delta.messages_in,
            "requests": delta.requests}


def render(results: dict[str, Any]) -> str:
    lines = []
    for name, run in results.items():
        for conc, s in run["inflight"].items():
            per = s["requests"]["per_message"]
            kinds = ", ".join(f"{k} {per.get(k, 0.0):.3f}" for k in MAIN_TYPES)
            other = sum(v for k, v in per.items() if k not in MAIN_TYPES)
            broker = s["broker_cpu_ms_per_message"]
            lines.append(
                f"{name} {conc} in flight: {s['rate']:.1f} sagas/s, p50 {s['p50_ms']:.1f} ms, "
                f"{s['messages_per_saga']:.2f} msgs/saga; requests/msg "
                f"{s['requests']['per_message_total']:.3f} ({kinds}, other {other:.3f}); "
                f"broker CPU ms/msg {'-' if broker is None else f'{broker:.3f}'}")
            if s.get("broker") and s["broker"]["per_message"]:
                lines.append("   the broker's own counters, requests/msg: " + _kinds(
                    s["broker"]["per_message"]) + f" ({s['broker']['messages_in']} messages)")
        idle = run["idle"]
        lines.append(f"{name} idle: {idle['per_s_total']:.2f} requests/s ("
                     + ", ".join(f"{k} {v:.2f}" for k, v in idle["per_s"].items()) + ")")
        if idle.get("broker"):
            lines.append("   the broker's own counters, requests/s: "
                         + _kinds(idle["broker"]["per_s"]))
    return "\n".join(lines)


#: The broker's request types shown apart (``Fetch`` counts consumers' and followers').
BROKER_TYPES = ("Produce", "FetchConsumer", "OffsetCommit", "Heartbeat", "Metadata")


def _kinds(per: dict[str, float]) -> str:
    other = sum(v for k, v in per.items() if k not in BROKER_TYPES and k != "Fetch")
    return ", ".join([*(f"{k} {per.get(k, 0.0):.3f}" for k in BROKER_TYPES),
                      f"other {other:.3f}"])


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import _variant

    p = argparse.ArgumentParser(prog="python -m bench.kafka_cost",
                                description=__doc__.splitlines()[0])
    p.add_argument("--postgres", default=os.environ.get(
        "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:55432/postgres"))
    p.add_argument("--kafka", default=os.environ.get(
        "SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--variant", action="append", default=[], metavar="NAME[:K=V,...]")
    p.add_argument("--inflight", default="1,16",
                   type=lambda s: [int(x) for x in s.split(",") if x])
    p.add_argument("--saga", default="bench_tcc3", choices=("bench_tcc3", "bench_steps3"))
    p.add_argument("--duration", type=float, default=15.0, help="window per measurement, s")
    p.add_argument("--idle", type=float, default=10.0, help="idle window per stack, s")
    p.add_argument("--output", type=Path, default=None)
    jmx = os.environ.get("SAGAFLOW_TEST_KAFKA_JMX_PORT")
    p.add_argument("--broker-jmx", type=int, default=int(jmx) if jmx else None, metavar="PORT",
                   help="also read the broker's own request counters over JMX on this port "
                        "(devstack's broker: $SAGAFLOW_TEST_KAFKA_JMX_PORT); broker-wide, so "
                        "exact only while nothing else uses the broker")
    args = p.parse_args(argv)
    if args.duration <= 0 or args.idle <= 0 or not args.inflight or min(args.inflight) < 1:
        p.error("--duration and --idle must be positive, --inflight counts at least 1")
    variants = dict(_variant(v) for v in args.variant) or {"this": {}}
    results = asyncio.run(measure(args, variants))
    print(render(results))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    out = args.output or RESULTS / f"kafka-cost-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python -m bench.kafka_cost " + " ".join(
        sys.argv[1:] if argv is None else argv), "load_average": os.getloadavg(),
        "results": results}, indent=2, default=str))
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
