"""Exceptions of the participant SDK and how failures are classified.

Hierarchy::

    ParticipantError                 root of every error this package raises
    ├── BusinessRejection            a business "no": non-retryable, stored in the barrier
    ├── TransientError               a failure that may pass (retried locally, then reported)
    └── ConfigurationError           a participant class or handler is declared wrongly

Retryability is the ``retryable`` class attribute, never a string match. Postgres failures are
classified by asyncpg exception class and SQLSTATE in :func:`is_transient`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import asyncpg

from participant_sdk.protocol import ErrorKind


class ParticipantError(Exception):
    """Root of the SDK's exceptions."""

    retryable: ClassVar[bool] = False


class BusinessRejection(ParticipantError):
    """Raise from a handler to refuse the command for good (e.g. insufficient funds).

    The handler's writes are rolled back, the rejection is stored in the barrier, and every
    duplicate of the command gets the same rejection without running the handler again.
    """

    retryable = False

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: Optional JSON-able data sent back as the reply's ``result``.
        self.details = details


class TransientError(ParticipantError):
    """Raise from a handler for a failure that may pass (the SDK retries, then reports FAILED)."""

    retryable = True


class ConfigurationError(ParticipantError):
    """A participant or handler is declared wrongly (found at class definition or start)."""


# SQLSTATEs that mean "try the transaction again": serialization failure, deadlock.
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a local failure worth retrying: class 08, 40001, 40P01, lost links."""
    if isinstance(exc, ParticipantError):
        return exc.retryable
    if isinstance(
        exc,
        asyncpg.PostgresConnectionError
        | asyncpg.exceptions.ConnectionDoesNotExistError
        # A multi-host DSN whose servers all answer but none takes writes yet (mid-failover).
        | asyncpg.exceptions.TargetServerAttributeNotMatched,
    ):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        sqlstate = str(getattr(exc, "sqlstate", "") or "")
        return sqlstate in _RETRY_SQLSTATES or sqlstate.startswith("08")
    return isinstance(exc, ConnectionError | TimeoutError | OSError)


def error_kind_for(exc: BaseException) -> ErrorKind:
    """The reply error kind for an exception that escaped a handler."""
    if isinstance(exc, BusinessRejection):
        return ErrorKind.BUSINESS
    return ErrorKind.TRANSIENT if is_transient(exc) else ErrorKind.UNEXPECTED
