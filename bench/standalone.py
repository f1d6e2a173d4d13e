"""Plumbing shared by the stand-alone benches (``bench.relay_throughput``,
``bench.outbox_notify``): service arguments, a throw-away database, topics created up front,
and the JSON result file."""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer

from bench.stack import dsn_for

RESULTS = Path(__file__).parent / "results"


def add_service_args(parser: argparse.ArgumentParser) -> None:
    """``--postgres`` and ``--kafka`` (test environment by default), ``--smoke``, ``--out``."""
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SAGAFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument(
        "--kafka", default=os.environ.get("SAGAFLOW_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    )
    parser.add_argument("--smoke", action="store_true", help="tiny run: checks the harness only")
    parser.add_argument("--out", type=Path, default=RESULTS)


@asynccontextmanager
async def fresh_database(admin_dsn: str) -> AsyncIterator[str]:
    """A new database beside ``admin_dsn`` (its DSN), dropped afterwards."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    try:
        yield dsn_for(admin_dsn, name)
    finally:
        admin = await asyncpg.connect(admin_dsn)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def warm_topics(bootstrap: str, topics: list[str]) -> None:
    """Create ``topics`` (auto-create on first produce) so no timed run waits for it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for t in topics:
            await (await producer.send(t, b"warm", key=b"warm"))
    finally:
        await producer.stop()


def write_result(args: argparse.Namespace, bench: str, result: dict[str, Any]) -> Path:
    """``<out>/<bench>-<smoke|full>-<timestamp>.json``."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tag = "smoke" if args.smoke else "full"
    path = out / f"{bench}-{tag}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return path
