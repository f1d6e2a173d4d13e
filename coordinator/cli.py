"""``python -m coordinator <verb>``: migrate, worker, api, verify, compact, diagram.

Each verb is one small function; options override ``SAGAFLOW_*`` environment settings.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any
from uuid import UUID

import asyncpg

from coordinator.diagram import main_diagram
from coordinator.migrations import migrate
from coordinator.schedules import ScheduleError
from coordinator.settings import CoordinatorSettings
from coordinator.store import SagaStore, StoreError
from coordinator.worker import SagaImportError, Worker, build_registry
from participant_sdk.logging_config import configure_logging
from participant_sdk.telemetry import configure as configure_telemetry

__all__ = ["main"]

Verb = Callable[[argparse.Namespace, CoordinatorSettings], Coroutine[Any, Any, int]]


def _settings(args: argparse.Namespace) -> CoordinatorSettings:
    overrides: dict[str, Any] = {}
    for name in ("dsn", "kafka_bootstrap", "topic_prefix", "group_id"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "saga", None):
        overrides["sagas"] = list(args.saga)
    if getattr(args, "migrate", False):
        overrides["migrate_on_start"] = True
    return CoordinatorSettings(**overrides)


async def cmd_migrate(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    conn = await asyncpg.connect(settings.dsn)
    try:
        applied = await migrate(conn)
    finally:
        await conn.close()
    print(f"applied migrations: {applied}" if applied else "schema is up to date")
    return 0


def _registry(settings: CoordinatorSettings) -> Any:
    if not settings.sagas:
        raise SagaImportError("no saga classes given: use --saga module:Class or SAGAFLOW_SAGAS")
    return build_registry(settings.sagas, topic_prefix=settings.topic_prefix)


async def cmd_worker(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    configure_telemetry("sagaflow-coordinator")
    await Worker(settings, _registry(settings)).run()
    return 0


async def cmd_api(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    from coordinator.api import ApiSettings, serve

    configure_telemetry("sagaflow-api")
    given = (("dsn", args.dsn), ("api_host", args.host), ("api_port", args.port),
             ("topic_prefix", args.topic_prefix))
    overrides: dict[str, Any] = {k: v for k, v in given if v is not None}
    if args.saga:
        overrides["sagas"] = list(args.saga)
    await serve(ApiSettings(**overrides))
    return 0


async def cmd_verify(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    failed = 0
    async with await SagaStore.open(settings.dsn, _registry(settings), max_size=2) as store:
        for saga_id in args.saga_id:
            result = await store.verify(saga_id)
            verdict = "ok" if result.ok else "MISMATCH"
            print(f"{saga_id}: {verdict} (replayed {result.replayed_events} events "
                  f"from seq {result.from_seq})")
            for line in result.differences:
                print(f"  {line}")
            failed += not result.ok
    return 1 if failed else 0


async def cmd_compact(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    async with await SagaStore.open(settings.dsn, _registry(settings), max_size=2) as store:
        if args.saga_id:
            for saga_id in args.saga_id:
                seq = await store.compact(saga_id, archive=args.archive)
                print(f"{saga_id}: checkpoint at seq {seq}")
        else:
            count = await store.compact_many(min_new_events=args.min_events,
                                             archive=args.archive)
            print(f"checkpointed {count} sagas")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m coordinator", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    verbs = parser.add_subparsers(dest="verb", required=True)

    def verb(name: str, fn: Verb, help: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help)
        sub.add_argument("--dsn", help="Postgres DSN (SAGAFLOW_DSN)")
        sub.set_defaults(fn=fn)
        return sub

    verb("migrate", cmd_migrate, "apply pending schema migrations")
    verbs.add_parser("diagram", add_help=False,
                     help="draw a saga class's state machine (Mermaid, or --json)")
    worker = verb("worker", cmd_worker, "run the reply consumer and the timer loop")
    worker.add_argument("--kafka-bootstrap", dest="kafka_bootstrap")
    worker.add_argument("--topic-prefix", dest="topic_prefix")
    worker.add_argument("--group-id", dest="group_id")
    worker.add_argument("--migrate", action="store_true", help="apply migrations first")
    verify = verb("verify", cmd_verify, "replay sagas' history and compare to the snapshot")
    verify.add_argument("saga_id", nargs="+", type=UUID)
    compact = verb("compact", cmd_compact, "write replay checkpoints")
    compact.add_argument("saga_id", nargs="*", type=UUID)
    compact.add_argument("--min-events", type=int, default=100,
                         help="without ids: checkpoint sagas with this many new events")
    compact.add_argument("--archive", action="store_true",
                         help="move history rows behind the checkpoint to the archive table")
    api = verb("api", cmd_api, "serve the operator HTTP API (SAGAFLOW_API_*)")
    api.add_argument("--host", help="bind address (SAGAFLOW_API_HOST)")
    api.add_argument("--port", type=int, help="port (SAGAFLOW_API_PORT)")
    for sub in (worker, verify, compact, api):
        sub.add_argument("--saga", action="append", metavar="MODULE:CLASS",
                         help="saga class to load (repeatable; SAGAFLOW_SAGAS)")
        if sub is not worker:
            sub.add_argument("--topic-prefix", dest="topic_prefix")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["diagram"]:  # needs no database: its own small parser
        return main_diagram(given[1:])
    args = _parser().parse_args(given)
    configure_logging("sagaflow-coordinator", level=logging.DEBUG if args.verbose else None)
    try:
        settings = _settings(args)
        code: int = asyncio.run(args.fn(args, settings))
    except (StoreError, SagaImportError, ScheduleError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
