"""Business keys at the start: the key of a new saga, and the saga already holding it.

The check and the INSERT run in the start's transaction under a transaction advisory lock on
the type and key (the two-int form, a key space of its own), so two concurrent starts with
the same key are serialised and the second one sees the first.
"""

from __future__ import annotations

from typing import Any, Final
from uuid import UUID

import asyncpg

from coordinator.engine import CompiledSaga
from coordinator.language.business_key import MAX_KEY_LENGTH, BusinessKey, business_key_of
from coordinator.store.errors import InvalidInput

__all__ = ["key_holder", "start_key"]

#: First half of the advisory lock key of a business key (the second: the key's hash).
_LOCK_CLASS: Final = 0x5A6A_0B4B
_LOCK: Final = "SELECT pg_advisory_xact_lock($1, hashtext($2))"
#: The status list is the one of index sagas_in_flight (0008).
_HOLDER: Final = """
SELECT id, status FROM sagas
WHERE business_key = $1 AND saga_type = $2 AND id <> $3
  AND ($4 OR status IN ('scheduled', 'running', 'compensating', 'dead'))
ORDER BY created_at DESC LIMIT 1
"""


def start_key(definition: CompiledSaga, data: dict[str, Any]
              ) -> tuple[str | None, BusinessKey | None]:
    """The business key of a start's validated input (JSON), and its declaration."""
    cls = definition.saga_class
    if cls is None or getattr(cls, "business_key", None) is None:
        return None, None
    try:
        key, spec = business_key_of(cls, definition.input_model.model_validate(data))
    except Exception as exc:  # the class's key function failed on this input
        raise _invalid(definition, f"the business key could not be computed: "
                                   f"{type(exc).__name__}: {exc}") from exc
    if key is not None and not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise _invalid(definition, f"the business key must be 1 to {MAX_KEY_LENGTH} "
                                   f"characters, got {len(key)}")
    return key, spec


def _invalid(definition: CompiledSaga, message: str) -> InvalidInput:
    return InvalidInput(definition.name, [{"loc": ("business_key",), "msg": message}])


async def key_holder(conn: asyncpg.Connection, saga_type: str, key: str, spec: BusinessKey,
                     saga_id: UUID) -> tuple[UUID, str] | None:
    """The saga other than ``saga_id`` that holds ``key`` as ``spec`` counts it (in flight,
    or ever), with its status; locks the key until the transaction ends."""
    if spec.unique == "none":
        return None
    await conn.execute(_LOCK, _LOCK_CLASS, f"{saga_type}\x1f{key}")
    row = await conn.fetchrow(_HOLDER, key, saga_type, saga_id, spec.unique == "always")
    return None if row is None else (row["id"], row["status"])
