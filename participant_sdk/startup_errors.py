"""Start-up failures as one line that says what to set, never a traceback.

A bad or missing setting, a database that does not exist, a login Postgres refuses and a
service that never came up are the user's to fix; :func:`run_cli` prints them as
``<prog>: error: <what> (<what to set>)`` and exits 2. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import ssl
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
from pydantic import AliasChoices, SecretStr, ValidationError

if TYPE_CHECKING:  # annotations only: a function's settings error needs no pydantic-settings
    from pydantic_settings import BaseSettings

__all__ = ["SettingsError", "StartupError", "explain", "load_settings", "run_cli"]

S = TypeVar("S", bound="BaseSettings")


class StartupError(Exception):
    """A start-up failure the user fixes; its message is the whole line to print."""


class SettingsError(StartupError, ValueError):
    """A setting is missing or malformed; the message names its environment variable."""


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


def explain(exc: BaseException, *, postgres_var: str, kafka_var: str) -> str | None:
    """The one line for a start-up failure the user can fix, or None for a bug."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return explain(exc.exceptions[0], postgres_var=postgres_var, kafka_var=kafka_var)
    if isinstance(exc, StartupError):
        return str(exc)
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"Postgres: {exc} (create it, or point {postgres_var} at a database that exists)"
    if isinstance(exc, asyncpg.InvalidPasswordError
                  | asyncpg.InvalidAuthorizationSpecificationError):
        return f"Postgres refused the login: {exc} (check the user and password in {postgres_var})"
    from aiokafka.errors import KafkaConnectionError, KafkaError  # not on a function's import path

    if isinstance(exc, KafkaConnectionError):
        return f"cannot reach Kafka: {exc} (is it running? set {kafka_var})"
    if isinstance(exc, KafkaError):
        return (f"Kafka refused: {type(exc).__name__}: {exc} (check {kafka_var} and the "
                "SAGAFLOW_KAFKA_SECURITY_PROTOCOL / _SASL_* / _SSL_* settings)")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS: the server's certificate does not verify: {exc.verify_message or exc} "
                f"(check sslmode and sslrootcert in {postgres_var}, or "
                "SAGAFLOW_KAFKA_SSL_CAFILE)")
    if isinstance(exc, OSError | asyncpg.CannotConnectNowError | TimeoutError):
        detail = str(exc) or type(exc).__name__
        return (f"cannot connect: {detail} (is the service running? set {postgres_var} and "
                f"{kafka_var}; for the local stack: eval \"$(python -m devstack env)\")")
    return None


def run_cli(body: Callable[[], int], *, prog: str, postgres_var: str,
            kafka_var: str = "SAGAFLOW_KAFKA_BOOTSTRAP") -> int:
    """Run a command's body; user-fixable start-up failures become one line and exit 2."""
    try:
        return body()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        line = explain(exc, postgres_var=postgres_var, kafka_var=kafka_var)
        if line is None:
            raise
        print(f"{prog}: error: {line}", file=sys.stderr)
        return 2
