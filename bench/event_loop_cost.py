"""``python -m bench.event_loop_cost``: a participant's CPU per command on each event loop.

One participant process (payments, from ``bench.participants``) answers TCC ``charge`` tries
and confirms over its direct lane, sent by this process's :class:`DirectClient` at each
``--inflight``; the participant runs on asyncio's loop or on uvloop
(``SAGAFLOW_EVENT_LOOP``), in turn, the order reversed each round, with a fresh database each
time. What is compared is the participant's own CPU (``/proc/<pid>/stat``, user + system) per
command, the same client, database and commands on both sides: the figure behind the
``auto`` default of :mod:`participant_sdk.event_loop`. Needs Postgres (``--postgres`` or
``SAGAFLOW_TEST_POSTGRES_URL``); Kafka only for the participant's start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from bench.stack import REPO, delete_prefixed_topics, free_port
from participant_sdk.direct import DirectClient
from participant_sdk.protocol import CommandEnvelope, Phase, command_topic

LOOPS = ("asyncio", "uvloop")
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _command(prefix: str, saga: uuid.UUID, phase: Phase) -> bytes:
    return CommandEnvelope(
        message_id=uuid.uuid4(), saga_id=saga, saga_type="bench", step="charge", phase=phase,
        attempt=1, participant="payments", action="charge",
        payload={"customer": f"c{saga.hex[:8]}", "amount": 5}, reply_to=f"{prefix}.replies",
    ).model_dump_json().encode()


def _start_participant(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "bench.participants", "payments"], env=env,
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measure(postgres: str, kafka: str, loop: str, sagas: int, inflight: int
                  ) -> dict[str, float]:
    """One participant on ``loop``: ``sagas`` try + confirm pairs, ``inflight`` at a time."""
    database = f"loopcost_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(postgres)
    await admin.execute(f'CREATE DATABASE "{database}"')
    await admin.close()
    prefix, address = f"lc{uuid.uuid4().hex[:8]}", f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SAGAFLOW_EVENT_LOOP": loop,
           "SAGAFLOW_PARTICIPANT_DSN": postgres.rsplit("/", 1)[0] + "/" + database,
           "SAGAFLOW_KAFKA_BOOTSTRAP": kafka, "SAGAFLOW_TOPIC_PREFIX": prefix,
           "SAGAFLOW_LOG_LEVEL": "WARNING", "SAGAFLOW_PARTICIPANT_DIRECT_LISTEN": address}
    proc = _start_participant(env)
    client = DirectClient(address, timeout=30, retry_after=0.1)
    topic = command_topic("payments", prefix)
    gate = asyncio.Semaphore(inflight)

    async def pair() -> None:
        saga = uuid.uuid4()
        async with gate:
            for phase in (Phase.TRY, Phase.CONFIRM):
                answer = await client.call(topic, saga.bytes, _command(prefix, saga, phase), [])
                if answer is None or answer.reply is None:
                    raise SystemExit(f"payments did not answer a {phase.value} ({answer})")

    try:
        for _ in range(300):  # until the lane listens
            saga = uuid.uuid4()
            if await client.call(topic, saga.bytes, _command(prefix, saga, Phase.TRY), []):
                break
            if proc.poll() is not None:
                raise SystemExit(f"the participant exited {proc.returncode}")
            await asyncio.sleep(0.1)
        await asyncio.gather(*(pair() for _ in range(200)))  # warm-up
        cpu, started = _cpu_s(proc.pid), time.perf_counter()
        await asyncio.gather(*(pair() for _ in range(sagas)))
        cpu, took = _cpu_s(proc.pid) - cpu, time.perf_counter() - started
        return {"cpu_us_per_command": cpu / (2 * sagas) * 1e6,
                "commands_per_s": 2 * sagas / took}
    finally:
        await client.close()
        proc.terminate()
        proc.wait()
        await delete_prefixed_topics(kafka, prefix)
        admin = await asyncpg.connect(postgres)
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {}
    for number in range(args.rounds):
        loops = LOOPS if number % 2 == 0 else LOOPS[::-1]
        for inflight in args.inflight:
            for loop in loops:
                result = await measure(args.postgres, args.kafka, loop, args.sagas, inflight)
                runs.setdefault(f"{loop}@{inflight}", []).append(result)
                print(f"round {number + 1}: {loop} at {inflight} in flight: {result}",
                      file=sys.stderr)
    summary = {}
    for inflight in args.inflight:
        medians = {loop: statistics.median(r["cpu_us_per_command"]
                                           for r in runs[f"{loop}@{inflight}"]) for loop in LOOPS}
        summary[f"{inflight} in flight"] = {
            **{f"{loop} CPU us per command (median)": round(v) for loop, v in medians.items()},
            "uvloop / asyncio": round(medians["uvloop"] / medians["asyncio"], 3)}
    return {"summary": summary, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.event_loop_cost",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("SAGAFLOW_TEST_POSTGRES_URL"))
    parser.add_argument("--kafka", default=os.environ.get("SAGAFLOW_TEST_KAFKA_BOOTSTRAP"))
    parser.add_argument("--sagas", type=int, default=1500, help="try + confirm pairs per run")
    parser.add_argument("--inflight", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 16])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if not args.postgres or not args.kafka:
        parser.error("give --postgres and --kafka (or eval \"$(python -m devstack env)\")")
    print(json.dumps(asyncio.run(run(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
