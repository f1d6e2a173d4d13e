"""Open connections at process start even when Postgres or Kafka is not up yet.

Services start in any order (a worker may boot before its database accepts connections, or
while the broker restarts), so start-up retries connection failures with capped backoff
instead of exiting with a traceback and leaving every saga waiting.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol, TypeVar

import asyncpg
from aiokafka.errors import KafkaConnectionError
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from participant_sdk.durations import Duration
from participant_sdk.errors import is_transient
from participant_sdk.startup_errors import ServiceUnavailable, load_settings

__all__ = ["STARTUP_TIMEOUT", "StartupSettings", "is_unavailable", "open_with_retry",
           "postgres_answers", "started"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long start-up keeps trying by default before it gives up and the process exits.
STARTUP_TIMEOUT = timedelta(minutes=2)


class StartupSettings(BaseSettings):
    """How long every process waits for Postgres and Kafka at start-up."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_", extra="ignore")

    #: How long start-up retries an unreachable Postgres or Kafka before the process exits
    #: with one line (exit 3 for Postgres, 4 for Kafka); a stop signal ends the wait at once.
    startup_timeout: Duration = STARTUP_TIMEOUT


def is_unavailable(exc: BaseException) -> bool:
    """A service that is down, starting or unreachable, as opposed to a misconfiguration (a
    certificate that does not verify will not verify on the next try either)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return False
    return isinstance(exc, asyncpg.CannotConnectNowError | KafkaConnectionError) or (
        is_transient(exc)
    )


async def open_with_retry(
    open_: Callable[[], Awaitable[T]], *, what: str, give_up_after: timedelta | None = None
) -> T:
    """Run ``open_`` until it succeeds, retrying while the service is unavailable; after
    ``give_up_after`` (default: ``SAGAFLOW_STARTUP_TIMEOUT``) raise
    :class:`ServiceUnavailable` naming ``what``."""
    if give_up_after is None:
        give_up_after = load_settings(StartupSettings).startup_timeout
    retrying = AsyncRetrying(
        retry=retry_if_exception(is_unavailable),
        wait=wait_exponential_jitter(multiplier=0.2, max=5.0),
        stop=stop_after_delay(give_up_after.total_seconds()),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                result = await open_()
                if attempt.retry_state.attempt_number > 1:
                    log.info("%s is available", what)
                return result
    except Exception as exc:
        if not is_unavailable(exc):
            raise
        raise ServiceUnavailable(what, str(exc) or type(exc).__name__,
                                 give_up_after.total_seconds()) from exc
    raise AssertionError("unreachable")  # pragma: no cover


async def postgres_answers(dsn: str) -> None:
    """Connect once and close: a start-up check for a process whose own connections open
    later (so a wrong login or a missing database ends its start-up with one line)."""
    conn = await asyncpg.connect(dsn, timeout=10)
    await conn.close()


class _Startable(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


S = TypeVar("S", bound=_Startable)


async def started(client: S) -> S:
    """``client`` (a Kafka producer or consumer) started, or stopped again if starting failed:
    aiokafka leaves its background tasks and sockets behind otherwise."""
    try:
        await client.start()
    except BaseException:
        with contextlib.suppress(Exception):
            await client.stop()
        raise
    return client
