"""Settings of the operator API, read from ``SAGAFLOW_*`` / ``SAGAFLOW_API_*`` variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX

__all__ = ["ApiSettings"]


class ApiSettings(BaseSettings):
    """Where the API finds Postgres and its sagas, who may call it, and how it serves."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_", extra="ignore")

    #: Postgres DSN of the coordinator's database (shared with the worker).
    dsn: str = "postgresql://postgres@127.0.0.1:5432/postgres"
    #: Saga classes to load, ``module:Class``; comma-separated in the environment.
    sagas: Annotated[list[str], NoDecode] = Field(default_factory=list)
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    #: ``name:role:token`` entries, comma-separated (``SAGAFLOW_API_TOKENS``). The token part
    #: may be ``sha256:<hex>`` to keep only a digest in the configuration.
    api_tokens: SecretStr = SecretStr("")
    #: A file of ``name:role:token`` lines (``#`` comments), read at start.
    api_tokens_file: Path | None = None
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    #: Run the bulk-repair job runner in this process.
    api_run_jobs: bool = True
    #: How long a runner owns a claimed job without renewing its lease.
    api_job_lease: timedelta = timedelta(seconds=30)
    #: How often the runner looks for unfinished jobs when nothing woke it.
    api_job_poll: timedelta = timedelta(seconds=2)
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)

    @field_validator("sagas", mode="before")
    @classmethod
    def _split_sagas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value
