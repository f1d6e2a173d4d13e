"""``python -m outbox_relay``: run one relay until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from prometheus_client import CollectorRegistry, start_http_server

from outbox_relay.relay import Relay
from outbox_relay.settings import RelaySettings
from participant_sdk.logging_config import configure_logging
from participant_sdk.telemetry import configure as configure_telemetry

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
    del argv
    configure_logging("sagaflow-relay")
    configure_telemetry("sagaflow-relay")
    settings = RelaySettings()
    try:
        asyncio.run(run(settings))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
