"""``sagaflow-relay`` (``python -m outbox_relay``): run one relay until SIGTERM/SIGINT.

Settings come from ``SAGAFLOW_RELAY_*`` environment variables (the configuration reference,
``docs/configuration.md``, lists them); the outbox DSN falls back to ``SAGAFLOW_DSN``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable

import asyncpg
from prometheus_client import CollectorRegistry

from outbox_relay.relay import Relay
from outbox_relay.settings import RelaySettings
from participant_sdk.event_loop import run as run_on_event_loop
from participant_sdk.logging_config import configure_logging
from participant_sdk.probes import ProbeServer, tasks_alive
from participant_sdk.startup import open_with_retry, postgres_answers
from participant_sdk.startup_errors import SettingsError, load_settings, run_cli
from participant_sdk.stopping import StopSignals, until_stopped
from participant_sdk.telemetry import configure as configure_telemetry
from participant_sdk.version import version_line

log = logging.getLogger("outbox_relay")


async def run(settings: RelaySettings) -> None:
    """Run a relay until a signal arrives, then drain the batch in flight and release shards
    (bounded: see :mod:`participant_sdk.stopping`; a signal during start-up ends it at once)."""
    registry = CollectorRegistry()
    relay = Relay(settings, registry=registry)
    stop = asyncio.Event()
    waiter: asyncio.Task[None] | None = None
    probes = _probes(settings, registry, lambda: waiter, stop)
    with StopSignals(stop.set):
        if probes is not None:
            await probes.start(settings.metrics_port or 0, settings.metrics_addr)
        try:
            began, _ = await until_stopped(_start(relay, settings), stop)
            if not began:
                log.info("relay %s stopped while starting", relay.name)
                await relay.stop()
                return
            log.info("relay %s started", relay.name)
            waiter = asyncio.create_task(relay.wait(), name="relay")
            stopper = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
                stop.set()
                log.info("relay %s stopping", relay.name)
                await relay.stop()
                waiter.cancel()
        finally:
            if probes is not None:
                await probes.stop()


async def _start(relay: Relay, settings: RelaySettings) -> None:
    """Postgres first (the loop would retry it forever), then Kafka and the loop."""
    await open_with_retry(lambda: postgres_answers(settings.postgres_dsn), what="Postgres")
    await relay.start()


def _probes(settings: RelaySettings, registry: CollectorRegistry,
            relay_task: Callable[[], asyncio.Task[None] | None],
            stopping: asyncio.Event) -> ProbeServer | None:
    """The probe port: alive while the relay's loop runs; ready while Postgres also answers
    (on a connection of the probe's own: the relay's is busy with its loop)."""
    if settings.metrics_port is None:
        return None
    conn: list[asyncpg.Connection] = []

    def live() -> str | None:
        return tasks_alive([relay_task()])

    async def ready() -> str | None:
        if relay_task() is None:
            return "starting"
        if stopping.is_set():
            return "stopping"
        if (reason := live()) is not None:
            return reason
        try:
            if not conn or conn[0].is_closed():
                conn[:] = [await asyncpg.connect(settings.postgres_dsn, timeout=1.5)]
            await conn[0].fetchval("SELECT 1")
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            if conn:
                conn.pop().terminate()
            return f"Postgres: {type(exc).__name__}"
        return None

    return ProbeServer(registry=registry, live=live, ready=ready, name="relay")


def main(argv: list[str] | None = None) -> int:
    """Entry point; settings come from ``SAGAFLOW_RELAY_*`` environment variables."""
    parser = argparse.ArgumentParser(prog="sagaflow-relay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_line("sagaflow-relay"))
    parser.parse_args(argv)

    def body() -> int:
        settings = load_settings(RelaySettings)
        if not settings.postgres_dsn:
            raise SettingsError("SAGAFLOW_RELAY_POSTGRES_DSN (or SAGAFLOW_DSN) is not set: the "
                                "database holding the outbox, the coordinator's")
        configure_logging("sagaflow-relay")
        configure_telemetry("sagaflow-relay")
        run_on_event_loop(run(settings))
        return 0

    return run_cli(body, prog="sagaflow-relay", postgres_var="SAGAFLOW_RELAY_POSTGRES_DSN",
                   kafka_var="SAGAFLOW_RELAY_KAFKA_BOOTSTRAP")


if __name__ == "__main__":
    sys.exit(main())
