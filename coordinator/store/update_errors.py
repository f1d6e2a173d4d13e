"""Errors of updates (``language.updates``), each with the HTTP status the API answers.

A rejection by the saga's validator is no error: it is an answer (``UpdateAnswer``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from coordinator.store.errors import SagaFinished, StoreError

__all__ = [
    "InvalidUpdatePayload",
    "SagaFinishedForUpdates",
    "UnknownUpdate",
    "UpdateBroken",
    "UpdateIdConflict",
    "UpdateNotFound",
    "UpdateTimedOut",
]


class UnknownUpdate(StoreError):
    """The saga's type declares no update of that name (HTTP 404)."""

    code = "unknown_update"
    http_status = 404

    def __init__(self, saga_type: str, name: str, known: Iterable[str]) -> None:
        self.known = sorted(set(known))
        self.api_details: Any = {"known": self.known}
        super().__init__(f"saga type {saga_type!r} takes no update {name!r} "
                         f"(its updates: {', '.join(self.known) or 'none'})")


class InvalidUpdatePayload(StoreError):
    """An update's payload fails the update's model (HTTP 422): nothing is applied."""

    code = "invalid_update_payload"
    http_status = 422

    def __init__(self, name: str, errors: Sequence[Any]) -> None:
        self.errors = list(errors)
        self.api_details = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg")),
                             "type": str(e.get("type", ""))} for e in self.errors]
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())) or 'payload'}: {e.get('msg')}"
            for e in self.errors)
        super().__init__(f"invalid payload for update {name!r}: {details}")


class SagaFinishedForUpdates(SagaFinished):
    """An update to a saga that finished (HTTP 409 ``saga_finished``, as for signals)."""

    def __init__(self, saga_id: UUID, status: str) -> None:
        super().__init__(saga_id, status)
        self.args = (f"saga {saga_id} is {status}: it takes no more updates",)


class UpdateIdConflict(StoreError):
    """The update id was already used on this saga for an update of another name (409)."""

    code = "update_id_conflict"
    http_status = 409

    def __init__(self, saga_id: UUID, update_id: str, name: str) -> None:
        super().__init__(f"update id {update_id!r} of saga {saga_id} was already used for "
                         f"the update {name!r}: send a new id")


class UpdateTimedOut(StoreError):
    """The saga's row stayed locked (its worker was applying something else) longer than
    the caller's wait: NOTHING was applied or stored. Resend the same id (HTTP 504)."""

    code = "update_timed_out"
    http_status = 504
    retryable = True

    def __init__(self, saga_id: UUID, update_id: str, wait_s: float) -> None:
        self.saga_id, self.update_id = saga_id, update_id
        super().__init__(f"update {update_id!r} of saga {saga_id} was not applied within "
                         f"{wait_s:g}s (the saga was busy); nothing was applied: resend the "
                         f"same update id to try again")


class UpdateNotFound(StoreError):
    """No answer is stored for that update id (never sent, or it timed out) (HTTP 404)."""

    code = "update_not_found"
    http_status = 404

    def __init__(self, saga_id: UUID, update_id: str) -> None:
        super().__init__(f"saga {saga_id} has no answered update {update_id!r} (never sent, "
                         f"or its wait ran out before it was applied)")


class UpdateBroken(StoreError):
    """The update's validator or handler broke (a bug in the saga class): nothing was
    applied (HTTP 500 ``update_failed``)."""

    code = "update_failed"
    http_status = 500
