"""Errors raised by the saga store.

Hierarchy::

    StoreError                  root of every error the store raises
    ├── UnknownSagaType         no saga class of that name is registered (lists the known ones)
    ├── UnknownSagaVersion      the type is known but not that version
    ├── InvalidInput            the start input fails the saga's input model (pydantic errors)
    ├── SagaNotFound            no saga with that id
    ├── SagaConflict            a start reused a saga id with another type or input
    │   └── BusinessKeyConflict a start's business key is held by another saga (named)
    ├── SagaFinished            a signal to a saga that already finished
    ├── UnknownSignal           the saga's type waits for no signal of that name
    ├── InvalidSignalPayload    a signal's payload fails its model (pydantic errors)
    ├── TooManySignals          the saga keeps as many untaken signals as its class allows
    └── TransientStoreError     serialization failure, deadlock, lost connection: retry
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

__all__ = [
    "BusinessKeyConflict",
    "InvalidInput",
    "InvalidSignalPayload",
    "SagaConflict",
    "SagaFinished",
    "SagaNotFound",
    "StoreError",
    "TooManySignals",
    "TransientStoreError",
    "UnknownSagaType",
    "UnknownSagaVersion",
    "UnknownSignal",
]


class StoreError(Exception):
    """Root of the store's errors."""

    #: Whether repeating the same call may succeed.
    retryable: bool = False
    #: Stable code for API error bodies.
    code: str = "store_error"


class UnknownSagaType(StoreError):
    code = "unknown_saga_type"

    def __init__(self, saga_type: str, known: Iterable[str]) -> None:
        self.saga_type = saga_type
        self.known = sorted(set(known))
        listed = ", ".join(self.known) or "none registered"
        super().__init__(f"unknown saga type {saga_type!r} (known types: {listed})")


class UnknownSagaVersion(StoreError):
    code = "unknown_saga_version"

    def __init__(self, saga_type: str, version: int, known: Iterable[int]) -> None:
        self.saga_type = saga_type
        self.version = version
        self.known = sorted(set(known))
        super().__init__(
            f"saga type {saga_type!r} has no version {version} registered "
            f"(registered versions: {', '.join(map(str, self.known)) or 'none'})"
        )


class InvalidInput(StoreError):
    code = "invalid_input"

    def __init__(self, saga_type: str, errors: Sequence[Any]) -> None:
        self.saga_type = saga_type
        #: pydantic's ``ValidationError.errors()`` list.
        self.errors = list(errors)
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())) or 'input'}: {e.get('msg')}"
            for e in self.errors
        )
        super().__init__(f"invalid input for saga type {saga_type!r}: {details}")


class SagaNotFound(StoreError):
    code = "saga_not_found"

    def __init__(self, saga_id: UUID) -> None:
        self.saga_id = saga_id
        super().__init__(f"no saga with id {saga_id}")


class SagaConflict(StoreError):
    code = "saga_conflict"

    def __init__(self, saga_id: UUID, reason: str) -> None:
        self.saga_id = saga_id
        super().__init__(f"saga {saga_id} already exists {reason}")


class BusinessKeyConflict(SagaConflict):
    code = "business_key_conflict"

    def __init__(self, saga_type: str, business_key: str, holder: UUID, status: str) -> None:
        StoreError.__init__(self, f"saga {holder} ({status}) already has the {saga_type} "
                                  f"business key {business_key!r}")
        self.saga_id = holder
        self.saga_type = saga_type
        self.business_key = business_key
        self.status = status


class TooManySignals(StoreError):
    """One more kept signal would pass the saga class's bound (``max_kept_signals``,
    ``max_kept_signals_per_name``): refused, nothing written (HTTP 409)."""

    code = "too_many_signals"

    def __init__(self, saga_id: UUID, why: str) -> None:
        self.saga_id = saga_id
        super().__init__(f"signal refused: {why}")


class SagaFinished(StoreError):
    code = "saga_finished"

    def __init__(self, saga_id: UUID, status: str) -> None:
        self.saga_id = saga_id
        self.status = status
        super().__init__(f"saga {saga_id} is {status}: it takes no more signals")


class UnknownSignal(StoreError):
    code = "unknown_signal"

    def __init__(self, saga_type: str, name: str, known: Iterable[str]) -> None:
        self.known = sorted(set(known))
        listed = ", ".join(self.known) or "none"
        super().__init__(f"saga type {saga_type!r} waits for no signal {name!r} "
                         f"(its signals: {listed})")


class InvalidSignalPayload(StoreError):
    code = "invalid_signal_payload"

    def __init__(self, name: str, errors: Sequence[Any]) -> None:
        self.errors = list(errors)
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())) or 'payload'}: {e.get('msg')}"
            for e in self.errors)
        super().__init__(f"invalid payload for signal {name!r}: {details}")


class TransientStoreError(StoreError):
    retryable = True
    code = "transient"
