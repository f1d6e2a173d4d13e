"""The few settings a coordinator function reads, without pydantic-settings.

Importing pydantic-settings and building :class:`~coordinator.config.settings.CoordinatorSettings`
(its Kafka security, durations and every source provider: dotenv, CLI, cloud secrets) costs a
reply function's cold start ~20 ms, for six values. :class:`FunctionSettings` reads the same
``SAGAFLOW_*`` variables, case-insensitively, with the same defaults and bounds (a unit test
pins them to ``CoordinatorSettings``). ``CoordinatorFunctions`` takes either.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX
from participant_sdk.startup_errors import SettingsError

__all__ = ["ENV_PREFIX", "FunctionSettings", "split_commas"]

#: The prefix of every variable, as for ``CoordinatorSettings``.
ENV_PREFIX = "SAGAFLOW_"


class FunctionSettings(BaseModel):
    """Where a coordinator function finds Postgres and its sagas, and its batch bounds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Postgres DSN of the coordinator's database (required, as for the worker).
    dsn: str = ""
    #: Prefix of every topic (``<prefix>.replies``, ``<prefix>.<participant>.commands``).
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    #: Saga classes to load, ``module:Class``; from the env as a comma-separated list.
    sagas: list[str] = Field(default_factory=list)
    #: Most connections of the instance's pool (``CoordinatorFunctions`` opens at least 2).
    pool_max_size: int = Field(default=10, ge=1)
    #: Most due timers claimed and fired in one transaction of a tick.
    timer_batch_size: int = Field(default=100, ge=1, le=10_000)
    #: NOTIFY the ids of the sagas an invocation ended before it returns, while an API waits
    #: for results (``coordinator.runtime.hints.results``).
    result_hints: bool = True

    @field_validator("sagas", mode="before")
    @classmethod
    def _split_sagas(cls, value: Any) -> Any:
        return split_commas(value)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any
                 ) -> FunctionSettings:
        """The settings in ``environ`` (default ``os.environ``), then ``overrides``; a bad
        value raises :class:`~participant_sdk.startup_errors.SettingsError` naming its
        variable."""
        env = os.environ if environ is None else environ
        wanted = {f"{ENV_PREFIX}{name}".lower(): name for name in cls.model_fields}
        values: dict[str, Any] = {}
        for key, value in env.items():
            name = wanted.get(key.lower())
            if name is not None:
                values[name] = value
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise SettingsError(_describe(exc)) from None


def split_commas(value: Any) -> Any:
    """A comma-separated list from the environment as a list (its blank items dropped)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        if field and field != "dsn":  # a DSN may carry a password
            message += f" (got {err['input']!r})"
        lines.append(f"{ENV_PREFIX}{field.upper()}: {message}" if field else message)
    return "; ".join(lines)
