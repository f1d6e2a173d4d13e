"""Errors raised by the outbox relay.

Hierarchy::

    OutboxError                 root of every error this package raises
    ├── InvalidMessageError     a message cannot be enqueued (bad topic, bad header); never retried
    ├── SchemaError             the outbox tables are missing or disagree with the settings
    └── RelayStateError         start()/stop() called in the wrong order
"""

from __future__ import annotations


class OutboxError(Exception):
    """Root of the outbox package's errors."""

    retryable: bool = False


class InvalidMessageError(OutboxError):
    """The message can never be published as given (topic name, header values)."""


class SchemaError(OutboxError):
    """The outbox schema is missing or does not match what the relay expects."""


class RelayStateError(OutboxError):
    """A relay was started twice, or used after stop()."""
