"""Settings of the operator API, read from ``SAGAFLOW_*`` / ``SAGAFLOW_API_*`` variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr

from coordinator.config.settings import CoordinatorSettings
from participant_sdk.durations import Duration

__all__ = ["ApiSettings"]


class ApiSettings(CoordinatorSettings):
    """The coordinator's settings (DSN, saga classes, topic prefix, pool), plus who may call
    the API and how it serves."""

    #: ``name:role:token`` entries, comma-separated (``SAGAFLOW_API_TOKENS``). The token part
    #: may be ``sha256:<hex>`` to keep only a digest in the configuration.
    api_tokens: SecretStr = SecretStr("")
    #: A file of ``name:role:token`` lines (``#`` comments), read at start.
    api_tokens_file: Path | None = None
    #: Address the API binds: ``0.0.0.0`` to be reachable from other hosts or containers.
    api_host: str = "127.0.0.1"
    #: Port the API serves on.
    api_port: int = Field(default=8080, ge=0, le=65535)
    #: Run the bulk-repair job runner in this process.
    api_run_jobs: bool = True
    #: The consumer group of each participant whose group is not its own name (the SDK's
    #: default), as JSON: ``{"hotels": "hotels-v2"}``. ``GET /participants`` and the console
    #: read each group's live members and lag from Kafka.
    participant_groups: dict[str, str] = Field(default_factory=dict)
    #: How long a runner owns a claimed job without renewing its lease.
    api_job_lease: Duration = timedelta(seconds=30)
    #: How often the runner looks for jobs nothing woke it for: another replica's (when that
    #: one runs none) or a stopped runner's after its lease. This process's own start at once.
    api_job_poll: Duration = timedelta(seconds=5)
