"""``sagaflow-coordinator <verb>`` (``python -m coordinator``): migrate, worker, api, topics,
verify, compact, diagram, compat, validate.

Each verb is one small function; options override ``SAGAFLOW_*`` environment settings (the
configuration reference, ``docs/configuration.md``, lists them). The worker and the API need
the ``coordinator`` extra; ``--help`` and ``--version`` work without it.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any
from uuid import UUID

from coordinator.config.settings import CoordinatorSettings
from participant_sdk.event_loop import run as run_on_event_loop
from participant_sdk.logging_config import configure_logging
from participant_sdk.startup_errors import SettingsError, StartupError, load_settings, run_cli
from participant_sdk.telemetry import configure as configure_telemetry
from participant_sdk.version import DISTRIBUTION, version_line

__all__ = ["main"]

#: One-shot commands (migrate, verify, compact) do not wait for Postgres: they fail at once.
_CONNECT_TIMEOUT = 10

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
    settings = load_settings(CoordinatorSettings, **overrides)
    if args.verb != "topics":  # the one verb that needs no database
        _require_dsn(settings)
    return settings


def _require_dsn(settings: CoordinatorSettings) -> None:
    """No DSN is a mistake to say at once, not a reason to retry some default for minutes."""
    if not settings.dsn:
        raise SettingsError("SAGAFLOW_DSN is not set (or pass --dsn): the coordinator's "
                            "Postgres database, e.g. postgresql://user@host:5432/sagaflow")


#: Modules of the ``coordinator`` extra: a verb that imports one without it says so.
_EXTRA_MODULES = frozenset({"fastapi", "starlette", "uvicorn", "jinja2", "itsdangerous",
                            "swagger_ui_bundle", "croniter", "holidays", "jwt", "yaml",
                            "jmespath"})


def _loaded(module: str, name: str) -> type[BaseException]:
    """An error class of a module already imported; one that never was cannot be raised."""
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else _NeverRaised


class _NeverRaised(Exception):
    pass


def _user_error(exc: BaseException) -> StartupError | None:
    """Coordinator failures the user fixes, as one line; None for anything else."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in _EXTRA_MODULES:
        return StartupError(f"this command needs the coordinator extra: pip install "
                            f"'{DISTRIBUTION}[coordinator]' (missing module {exc.name!r})")
    if isinstance(exc, _loaded("coordinator.api.auth", "AuthConfigError")):
        text = str(exc)  # the JWT settings' messages name their variable
        return StartupError(text if text.startswith("SAGAFLOW_") else
                            f"SAGAFLOW_API_TOKENS / SAGAFLOW_API_TOKENS_FILE: {text}")
    if isinstance(exc, _loaded("coordinator.sagas.loading", "SagaImportError")):
        hint = "" if "SAGAFLOW_SAGAS" in str(exc) else " (check --saga / SAGAFLOW_SAGAS)"
        return StartupError(f"{exc}{hint}")
    known = (_loaded("coordinator.store.errors", "StoreError"),
             _loaded("coordinator.schedules.errors", "ScheduleError"))
    if isinstance(exc, known):
        return StartupError(str(exc))
    return None


async def cmd_migrate(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    import asyncpg

    from coordinator.migrations import migrate

    conn = await asyncpg.connect(settings.dsn, timeout=_CONNECT_TIMEOUT)
    try:
        applied = await migrate(conn)
    finally:
        await conn.close()
    print(f"applied migrations: {applied}" if applied else "schema is up to date")
    return 0


def _registry(settings: CoordinatorSettings) -> Any:
    from coordinator.runtime.worker import SagaImportError, build_registry

    if not settings.sagas:
        raise SagaImportError("no saga classes given: use --saga module:Class or SAGAFLOW_SAGAS")
    return build_registry(settings.sagas, topic_prefix=settings.topic_prefix)


async def cmd_worker(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    from coordinator.config.gc_tuning import tune_gc
    from coordinator.runtime.worker import Worker

    configure_telemetry("sagaflow-coordinator")
    tune_gc(settings.gc_thresholds)
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
    api_settings = load_settings(ApiSettings, **overrides)
    _require_dsn(api_settings)
    await serve(api_settings)
    return 0


async def cmd_topics(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    from coordinator.runtime.topics import ensure_topics, saga_topics

    topics = saga_topics(_registry(settings).types())
    if args.dry_run:
        print("\n".join(topics))
        return 0
    made = await ensure_topics(settings.kafka_bootstrap, settings.kafka_security, topics,
                               partitions=args.partitions,
                               replication_factor=args.replication_factor)
    for topic, created in made.items():
        print(f"{topic}: {'created' if created else 'exists'}")
    return 0


async def cmd_verify(args: argparse.Namespace, settings: CoordinatorSettings) -> int:
    from coordinator.store import SagaStore

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
    from coordinator.store import SagaStore

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


def plain(text: str | None) -> str:
    """A docstring as --help shows it: without reST markup (double backquotes, roles)."""
    return re.sub(r":\w+:`~?([^`]+)`", r"\1", (text or "").replace("``", ""))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sagaflow-coordinator", description=plain(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=version_line("sagaflow-coordinator"))
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="debug logging")
    verbs = parser.add_subparsers(dest="verb", required=True)

    def verb(name: str, fn: Verb, help: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help, description=help, parents=[flags])
        sub.add_argument("--dsn", help="Postgres DSN (SAGAFLOW_DSN)")
        sub.set_defaults(fn=fn)
        return sub

    verb("migrate", cmd_migrate, "apply pending schema migrations")
    verbs.add_parser("diagram", add_help=False,
                     help="draw a saga class's state machine (Mermaid, or --json)")
    verbs.add_parser("compat", add_help=False,
                     help="compare two saga versions' input models; exit 1 when breaking")
    verbs.add_parser("validate", add_help=False,
                     help="check saga definition files (JSON/YAML); exit 1 on any problem")
    worker = verb("worker", cmd_worker, "run the reply consumer and the timer loop")
    worker.add_argument("--kafka-bootstrap", dest="kafka_bootstrap",
                        help="Kafka bootstrap servers (SAGAFLOW_KAFKA_BOOTSTRAP)")
    worker.add_argument("--topic-prefix", dest="topic_prefix",
                        help="prefix of every topic (SAGAFLOW_TOPIC_PREFIX)")
    worker.add_argument("--group-id", dest="group_id",
                        help="Kafka consumer group of the workers (SAGAFLOW_GROUP_ID)")
    worker.add_argument("--migrate", action="store_true", help="apply migrations first")
    topics = verb("topics", cmd_topics, "create the reply and command topics of the saga types "
                  "(SAGAFLOW_KAFKA_* for TLS and SASL)")
    topics.add_argument("--kafka-bootstrap", dest="kafka_bootstrap",
                        help="Kafka bootstrap servers (SAGAFLOW_KAFKA_BOOTSTRAP)")
    topics.add_argument("--partitions", type=int, default=12,
                        help="partitions of each new topic (default 12; one saga's messages "
                        "always share a partition)")
    topics.add_argument("--replication-factor", type=int, default=3, dest="replication_factor",
                        help="replicas of each new topic (default 3; 1 on a one-broker cluster)")
    topics.add_argument("--dry-run", action="store_true", dest="dry_run",
                        help="print the topic names, create nothing")
    verify = verb("verify", cmd_verify, "replay sagas' history and compare to the snapshot")
    verify.add_argument("saga_id", nargs="+", type=UUID, help="saga ids")
    compact = verb("compact", cmd_compact, "write replay checkpoints")
    compact.add_argument("saga_id", nargs="*", type=UUID,
                         help="saga ids (none: every saga with --min-events new events)")
    compact.add_argument("--min-events", type=int, default=100,
                         help="without ids: checkpoint sagas with this many new events")
    compact.add_argument("--archive", action="store_true",
                         help="move history rows behind the checkpoint to the archive table")
    api = verb("api", cmd_api, "serve the operator HTTP API (SAGAFLOW_API_*)")
    api.add_argument("--host", help="bind address (SAGAFLOW_API_HOST)")
    api.add_argument("--port", type=int, help="port (SAGAFLOW_API_PORT)")
    for sub in (worker, topics, verify, compact, api):
        sub.add_argument("--saga", action="append", metavar="MODULE:CLASS|FILE.yaml",
                         help="saga class, or saga definition file, to load (repeatable; "
                         "SAGAFLOW_SAGAS)")
        if sub is not worker:
            sub.add_argument("--topic-prefix", dest="topic_prefix",
                             help="prefix of every topic (SAGAFLOW_TOPIC_PREFIX)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["diagram"]:  # needs no database: its own small parser
        from coordinator.sagas.diagram import main_diagram

        return main_diagram(given[1:])
    if given[:1] == ["compat"]:  # neither
        from coordinator.versioning.compat import main_compat

        return main_compat(given[1:])
    if given[:1] == ["validate"]:  # nor this one
        from coordinator.cli.validate import main_validate

        return main_validate(given[1:])
    args = _parser().parse_args(given)
    service = "sagaflow-api" if args.verb == "api" else "sagaflow-coordinator"
    configure_logging(service, level=logging.DEBUG if args.verbose else None)

    def body() -> int:
        try:
            settings = _settings(args)
            code: int = run_on_event_loop(args.fn(args, settings))
        except Exception as exc:
            error = _user_error(exc)
            if error is None:
                raise
            raise error from None
        return code

    return run_cli(body, prog="sagaflow-coordinator", postgres_var="SAGAFLOW_DSN")
