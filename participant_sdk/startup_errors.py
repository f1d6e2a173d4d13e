"""Start-up failures as one line that says what to set, never a traceback.

A bad or missing setting, a database that does not exist, a login Postgres refuses and a
service that never came up are the user's to fix; :func:`run_cli` prints them as
``<prog>: error: <what> (<what to set>)`` on stderr and exits with the cause's
:class:`ExitCode` (``docs/operations.md`` lists them). Anything else is a bug and keeps its
traceback (exit 1).

``StartupError`` (exit 2 unless it says otherwise)
 ├── ``SettingsError``: a missing or malformed setting
 └── ``ServiceUnavailable``: Postgres or Kafka did not answer within the start-up timeout
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import signal
import ssl
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
from pydantic import AliasChoices, SecretStr, ValidationError

if TYPE_CHECKING:  # annotations only: a function's settings error needs no pydantic-settings
    from pydantic_settings import BaseSettings

__all__ = ["ExitCode", "ServiceUnavailable", "SettingsError", "StartupError", "explain",
           "load_settings", "run_cli"]

S = TypeVar("S", bound="BaseSettings")


class ExitCode(enum.IntEnum):
    """How every sagaflow process and command ends, one code per cause."""

    #: Done, or stopped on request (SIGTERM, SIGINT).
    OK = 0
    #: The command's own negative answer (a replay mismatch, a breaking change), or a bug.
    FAILED = 1
    #: A missing or malformed setting or option, a saga module that does not import, a
    #: missing extra: fix the configuration.
    SETTINGS = 2
    #: Postgres: unreachable, refusing connections, refusing the login, no such database,
    #: or a TLS certificate that does not verify.
    POSTGRES = 3
    #: Kafka: unreachable or refusing the client.
    KAFKA = 4


class StartupError(Exception):
    """A start-up failure the user fixes; its message is the whole line to print."""

    exit_code: ExitCode = ExitCode.SETTINGS

    def __init__(self, message: str, *, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class SettingsError(StartupError, ValueError):
    """A setting is missing or malformed; the message names its environment variable."""


class ServiceUnavailable(StartupError):
    """Postgres or Kafka did not answer within the start-up timeout: ``service`` names which
    (the line printed names the variable to set)."""

    def __init__(self, service: str, detail: str, waited: float) -> None:
        self.service = service
        self.detail = detail
        self.waited = waited
        kafka = service.lower() == "kafka"
        super().__init__(f"cannot reach {service} after {waited:.0f}s: {detail}",
                         exit_code=ExitCode.KAFKA if kafka else ExitCode.POSTGRES)


def env_names(cls: type[BaseSettings], field: str) -> list[str]:
    """The environment variables a settings field reads, the preferred one first."""
    info = cls.model_fields[field]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        names = [c for c in alias.choices if isinstance(c, str) and c.isupper()]
        if names:
            return names
    if isinstance(alias, str):
        return [alias.upper()]
    prefix = str(cls.model_config.get("env_prefix", ""))
    return [f"{prefix}{field}".upper()]


def _is_secret(cls: type[BaseSettings], field: str) -> bool:
    info = cls.model_fields.get(field)
    secret = info is not None and info.annotation is SecretStr
    return secret or any(w in field.lower() for w in ("token", "password", "secret", "dsn"))


def _describe(cls: type[BaseSettings], exc: ValidationError) -> str:
    lines: list[str] = []
    for err in exc.errors():
        where = str(err["loc"][0]) if err["loc"] else ""
        field = next((f for f in cls.model_fields if where in (f, *env_names(cls, f))), None)
        name = env_names(cls, field)[0] if field else where.upper()
        if err["type"] == "missing":
            lines.append(f"{name} is not set")
            continue
        message = str(err["msg"]).removeprefix("Value error, ")
        if not where:
            lines.append(message)
            continue
        if field is not None and not _is_secret(cls, field) and "not a duration" not in message:
            message += f" (got {err['input']!r})"
        lines.append(f"{name}: {message}")
    return "; ".join(lines)


def load_settings(cls: type[S], **overrides: Any) -> S:
    """``cls(**overrides)`` with validation errors as one :class:`SettingsError` line."""
    try:
        return cls(**overrides)
    except ValidationError as exc:
        raise SettingsError(_describe(cls, exc)) from None


def explain(exc: BaseException, *, postgres_var: str,
            kafka_var: str) -> tuple[str, ExitCode] | None:
    """The one line and exit code of a start-up failure the user can fix, or None for a bug."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return explain(exc.exceptions[0], postgres_var=postgres_var, kafka_var=kafka_var)
    if isinstance(exc, ServiceUnavailable):
        var = kafka_var if exc.exit_code is ExitCode.KAFKA else postgres_var
        return (f"{exc} (is it running? check {var}; SAGAFLOW_STARTUP_TIMEOUT sets how long "
                "start-up waits)", exc.exit_code)
    if isinstance(exc, StartupError):
        return str(exc), exc.exit_code
    pg = ExitCode.POSTGRES
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return (f"Postgres: {exc} (create it, or point {postgres_var} at a database that "
                "exists)", pg)
    if isinstance(exc, asyncpg.InvalidPasswordError
                  | asyncpg.InvalidAuthorizationSpecificationError):
        return (f"Postgres refused the login: {exc} (check the user and password in "
                f"{postgres_var})", pg)
    from aiokafka.errors import KafkaConnectionError, KafkaError  # not on a function's import path

    if isinstance(exc, KafkaConnectionError):
        return f"cannot reach Kafka: {exc} (is it running? set {kafka_var})", ExitCode.KAFKA
    if isinstance(exc, KafkaError):
        return (f"Kafka refused: {type(exc).__name__}: {exc} (check {kafka_var} and the "
                "SAGAFLOW_KAFKA_SECURITY_PROTOCOL / _SASL_* / _SSL_* settings)", ExitCode.KAFKA)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS: the server's certificate does not verify: {exc.verify_message or exc} "
                f"(check sslmode and sslrootcert in {postgres_var}, or "
                "SAGAFLOW_KAFKA_SSL_CAFILE)", pg)
    if isinstance(exc, asyncpg.PostgresConnectionError | asyncpg.TooManyConnectionsError):
        return f"Postgres refused the connection: {exc} (check {postgres_var})", pg
    if isinstance(exc, asyncpg.UndefinedTableError):
        return (f"Postgres: {exc} (the schema is missing: run `sagaflow-coordinator migrate` "
                f"on the database of {postgres_var})", pg)
    if isinstance(exc, OSError | asyncpg.CannotConnectNowError | TimeoutError):
        # Kafka's client wraps its socket errors in KafkaError: a bare one is Postgres's.
        detail = str(exc) or type(exc).__name__
        return (f"cannot reach Postgres: {detail} (is it running? set {postgres_var}; for "
                "the local stack: eval \"$(python -m devstack env)\")", pg)
    return None


def run_cli(body: Callable[[], int], *, prog: str, postgres_var: str,
            kafka_var: str = "SAGAFLOW_KAFKA_BOOTSTRAP") -> int:
    """Run a command's body; user-fixable start-up failures become one line on stderr and
    the cause's :class:`ExitCode`. A stop signal before the command handles signals itself
    (while it imports and reads its settings) ends it with exit 0 too."""
    try:
        with _stop_signals_exit():
            return body()
    except (KeyboardInterrupt, asyncio.CancelledError):
        # CancelledError: a stop signal's grace ran out and cancelled the main task
        # (``participant_sdk.stopping``): stopped on request all the same.
        return ExitCode.OK
    except Exception as exc:
        found = explain(exc, postgres_var=postgres_var, kafka_var=kafka_var)
        if found is None:
            raise
        line, code = found
        print(f"{prog}: error: {line}", file=sys.stderr)
        return code


@contextlib.contextmanager
def _stop_signals_exit() -> Iterator[None]:
    """SIGTERM exits 0 until an event loop takes the signal over (``StopSignals``)."""

    def stop(signum: int, frame: object) -> None:
        gc.freeze()  # as StopSignals does: no final collection of a heap that dies anyway
        raise SystemExit(ExitCode.OK)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: the embedding program owns the signals
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
