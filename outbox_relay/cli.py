"""``sagaflow-relay`` (``python -m outbox_relay``): run one relay until SIGTERM/SIGINT.

Settings come from ``SAGAFLOW_RELAY_*`` environment variables (the configuration reference,
``docs/configuration.md``, lists them); the outbox DSN falls back to ``SAGAFLOW_DSN``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from prometheus_client import CollectorRegistry, start_http_server

from outbox_relay.relay import Relay
from outbox_relay.settings import RelaySettings
from participant_sdk.logging_config import configure_logging
from participant_sdk.startup_errors import load_settings, run_cli
from participant_sdk.telemetry import configure as configure_telemetry
from participant_sdk.version import version_line

log = logging.getLogger("outbox_relay")


async def run(settings: RelaySettings) -> None:
    """Run a relay until a signal arrives, then drain the batch in flight and release shards."""
    registry = CollectorRegistry()
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port, addr=settings.metrics_addr, registry=registry)
        log.info("metrics on http://%s:%d/metrics", settings.metrics_addr, settings.metrics_port)
    relay = Relay(settings, registry=registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await relay.start()
    log.info("relay %s started", relay.name)
    waiter = asyncio.create_task(relay.wait())
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        log.info("relay %s stopping", relay.name)
        await relay.stop()
        waiter.cancel()


def main(argv: list[str] | None = None) -> int:
    """Entry point; settings come from ``SAGAFLOW_RELAY_*`` environment variables."""
    parser = argparse.ArgumentParser(prog="sagaflow-relay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_line("sagaflow-relay"))
    parser.parse_args(argv)

    def body() -> int:
        settings = load_settings(RelaySettings)
        configure_logging("sagaflow-relay")
        configure_telemetry("sagaflow-relay")
        asyncio.run(run(settings))
        return 0

    return run_cli(body, prog="sagaflow-relay", postgres_var="SAGAFLOW_RELAY_POSTGRES_DSN",
                   kafka_var="SAGAFLOW_RELAY_KAFKA_BOOTSTRAP")


if __name__ == "__main__":
    sys.exit(main())
