"""Replay-verify one saga for the API and for verify jobs: its history, replayed through the
core, must rebuild exactly the stored snapshot (the store does the replay)."""

from __future__ import annotations

from typing import Final
from uuid import UUID

from coordinator.store import SagaNotFound, SagaStore, StoreError, TransientStoreError

__all__ = ["VERIFY_VERB", "verify_one"]

#: The ``repair_jobs.verb`` of a verify job (repair verbs are the engine's ``RepairVerb``s).
VERIFY_VERB: Final = "verify"

#: Most differences kept in a job item's message.
_SHOWN: Final = 20

#: (outcome, saga status, message) of one item, as ``repair_job_items`` records it.
ItemResult = tuple[str, str | None, str | None]


async def verify_one(store: SagaStore, saga_id: UUID) -> ItemResult:
    """``verified``, ``differs`` (with the differences), ``not_found`` or ``failed``."""
    try:
        result = await store.verify(saga_id)
        record = await store.get_saga(saga_id)
    except SagaNotFound as exc:
        return "not_found", None, str(exc)
    except TransientStoreError:
        raise  # the round is retried; the item stays pending
    except (StoreError, ValueError) as exc:  # e.g. its version is no longer registered
        return "failed", None, f"{type(exc).__name__}: {exc}"
    status = None if record is None else record.status
    if result.ok:
        return "verified", status, None
    shown = result.differences[:_SHOWN]
    more = len(result.differences) - len(shown)
    return "differs", status, "; ".join(shown) + (f"; … {more} more" if more else "")
