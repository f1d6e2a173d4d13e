"""Micro-benchmark of the pure core: ``advance`` over a 3-step TCC saga's whole reply sequence.

``python -m bench.engine_advance [--sagas 2000] [--baseline REV]`` drives ``--sagas`` sagas of
``bench.sagas:Tcc3`` through start, three try replies and three confirm replies (every reply
OK), all in memory, and prints microseconds per reply for:

- ``advance``: the core alone (state in, decision out);
- ``store path``: what the worker does per reply around it: the snapshot read back from JSON
  text (``SagaState.from_json(json.loads(...))``), ``advance``, and the new snapshot written
  (``json.dumps(state.to_json())``).

With ``--baseline REV`` (for instance ``HEAD``) the engine as committed at ``REV`` is
extracted with ``git archive`` into a temporary package and measured in the same process, so
both figures share the machine's load. Nothing in the working tree changes.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.sagas import Tcc3
from participant_sdk.protocol import Outcome, ReplyEnvelope

ROOT = Path(__file__).resolve().parent.parent
INPUT = {"customer_id": "c-1", "amount_cents": 1250, "sku": "sku-9", "quantity": 2,
         "address": "1 Main St"}
_REPLY_NS = uuid.UUID("0c2d7f1e-8b3a-4d5e-9f60-7a1b2c3d4e5f")


def load_engine(rev: str | None) -> ModuleType:
    """``coordinator.engine`` of the working tree, or as committed at ``rev``."""
    if rev is None:
        return importlib.import_module("coordinator.engine")
    name = "_engine_" + "".join(c if c.isalnum() else "_" for c in rev)
    tmp = Path(tempfile.mkdtemp(prefix="engine-baseline-"))
    blob = subprocess.run(["git", "archive", rev, "coordinator/engine"], cwd=ROOT,
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(tmp, filter="data")
    src = tmp / "coordinator" / "engine"
    for path in src.rglob("*.py"):  # the nodes subpackage too
        path.write_text(path.read_text().replace("coordinator.engine", name))
    src.rename(tmp / name)
    sys.path.insert(0, str(tmp))
    return importlib.import_module(name)


def _reply(cmd: Any, n: int) -> ReplyEnvelope:
    return ReplyEnvelope(message_id=uuid.uuid5(_REPLY_NS, f"{cmd.message_id}/{n}"),
                         in_reply_to=cmd.message_id, saga_id=cmd.saga_id, step=cmd.step,
                         phase=cmd.phase, attempt=cmd.attempt, participant=cmd.participant,
                         outcome=Outcome.OK, result={"ok": cmd.step})


def run(engine: ModuleType, sagas: int) -> dict[str, float]:
    """Drive ``sagas`` sagas; returns µs per reply and replies/hops per saga."""
    definition = engine.compile_saga(Tcc3)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    t_advance = t_store = 0
    replies = hops = 0
    clock = time.perf_counter_ns
    for i in range(sagas):
        start = engine.SagaStarted(saga_id=uuid.UUID(int=i + 1), saga_type=definition.name,
                                   version=definition.version, input=INPUT)
        decision = engine.advance(definition, None, start, now)
        text = json.dumps(decision.state.to_json())
        inbox = [c.envelope for c in decision.commands]
        while inbox:
            hops += 1
            batch, inbox = inbox, []
            for cmd in batch:
                event = engine.ReplyReceived(reply=_reply(cmd, replies))
                now += timedelta(milliseconds=1)
                t0 = clock()
                state = engine.SagaState.from_json(json.loads(text))
                t1 = clock()
                decision = engine.advance(definition, state, event, now)
                t2 = clock()
                text = json.dumps(decision.state.to_json())
                t3 = clock()
                t_advance += t2 - t1
                t_store += t3 - t0
                replies += 1
                inbox.extend(c.envelope for c in decision.commands)
        assert decision.state.status.value == "completed", decision.state.status
    return {"advance_us": t_advance / replies / 1000, "store_path_us": t_store / replies / 1000,
            "replies_per_saga": replies / sagas, "hops_per_saga": hops / sagas}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_advance",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--sagas", type=int, default=2000)
    parser.add_argument("--baseline", default=None,
                        help="git revision whose engine to measure alongside (e.g. HEAD)")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs")
    args = parser.parse_args(argv)
    engines = [("working tree", load_engine(None))]
    if args.baseline:
        engines.insert(0, (f"baseline {args.baseline}", load_engine(args.baseline)))
    for engine in (e for _, e in engines):  # warm up imports and pydantic's caches
        run(engine, 20)
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for label, engine in engines:  # interleaved: both see the same machine load
            got = run(engine, args.sagas)
            if label not in best or got["store_path_us"] < best[label]["store_path_us"]:
                best[label] = got
    print(f"{'engine':<24} {'advance µs/reply':>17} {'store path µs/reply':>20} "
          f"{'replies/saga':>13} {'hops/saga':>10}")
    for label, got in best.items():
        print(f"{label:<24} {got['advance_us']:>17.1f} {got['store_path_us']:>20.1f} "
              f"{got['replies_per_saga']:>13.1f} {got['hops_per_saga']:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
