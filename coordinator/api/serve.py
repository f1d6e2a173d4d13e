"""Serving the API with uvicorn: what ``python -m coordinator api`` runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import uvicorn

from coordinator.api.app import create_app
from coordinator.api.settings import ApiSettings
from coordinator.sagas.loading import build_registry
from participant_sdk.startup import open_with_retry, postgres_answers
from participant_sdk.stopping import StopSignals, until_stopped

__all__ = ["serve"]

log = logging.getLogger(__name__)

#: Longest wait for open requests (long polls included) once a stop was asked for.
_DRAIN_SECONDS = 1


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: :class:`StopSignals` owns the signals, so
    that a signal during start-up, or while requests drain, is bounded like everywhere."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(settings: ApiSettings) -> None:
    """Serve until SIGINT/SIGTERM: wait for Postgres (a refused login or a missing database
    ends it with one line), then serve, and on a signal drain briefly and exit."""
    # The saga classes are imported here, not in the app's lifespan, so that one that cannot
    # be imported is a one-line start-up error rather than uvicorn's traceback; the same for
    # a database that is not there (uvicorn would log the lifespan's traceback and exit 3).
    app = create_app(settings, registry=build_registry(settings.sagas,
                                                       topic_prefix=settings.topic_prefix))
    config = uvicorn.Config(app, host=settings.api_host,
                            port=settings.api_port, log_level="info", access_log=False,
                            log_config=None,  # uvicorn's loggers use the process's handler
                            timeout_graceful_shutdown=_DRAIN_SECONDS)
    server = _Server(config)
    stop = asyncio.Event()

    def request_stop() -> None:
        stop.set()
        server.should_exit = True

    with StopSignals(request_stop):
        ready, _ = await until_stopped(
            open_with_retry(lambda: postgres_answers(settings.dsn), what="Postgres"), stop)
        if not ready:
            log.info("stopped while waiting for Postgres")
            return
        await server.serve()
