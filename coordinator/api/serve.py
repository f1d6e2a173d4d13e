"""Serving the API with uvicorn: what ``python -m coordinator api`` runs."""

from __future__ import annotations

import uvicorn

from coordinator.api.app import create_app
from coordinator.api.settings import ApiSettings
from coordinator.sagas.loading import build_registry

__all__ = ["serve"]


async def serve(settings: ApiSettings) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn handles the signals and the graceful drain)."""
    # The saga classes are imported here, not in the app's lifespan, so that one that cannot
    # be imported is a one-line start-up error rather than uvicorn's traceback.
    app = create_app(settings, registry=build_registry(settings.sagas,
                                                       topic_prefix=settings.topic_prefix))
    config = uvicorn.Config(app, host=settings.api_host,
                            port=settings.api_port, log_level="info", access_log=False,
                            log_config=None)  # uvicorn's loggers use the process's handler
    await uvicorn.Server(config).serve()
