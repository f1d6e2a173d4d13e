"""Serving the API with uvicorn: what ``python -m coordinator api`` runs."""

from __future__ import annotations

import uvicorn

from coordinator.api.app import create_app
from coordinator.api.settings import ApiSettings

__all__ = ["serve"]


async def serve(settings: ApiSettings) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn handles the signals and the graceful drain)."""
    config = uvicorn.Config(create_app(settings), host=settings.api_host,
                            port=settings.api_port, log_level="info", access_log=False,
                            log_config=None)  # uvicorn's loggers use the process's handler
    await uvicorn.Server(config).serve()
