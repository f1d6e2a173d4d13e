"""Operator repairs, one saga at a time, through the store's ``apply`` (one transaction).

A repair is an ``OperatorRepair`` event: the engine checks that the verb is legal (raising
``InvalidTransition`` with the reason) and the store commits the change, its history row
(actor ``operator:<name>``, the reason in the event) and its commands together.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from coordinator.engine import OperatorRepair, RepairVerb
from coordinator.store import ApplyResult, SagaStore

__all__ = ["RepairOptions", "apply_repair", "operator_actor"]

audit = logging.getLogger("coordinator.api.audit")


def operator_actor(name: str) -> str:
    """The history ``actor`` of a change an operator made."""
    return f"operator:{name}"


@dataclass(frozen=True, slots=True)
class RepairOptions:
    """What a verb takes besides the reason (see ``OperatorRepair``)."""

    step: str | None = None
    payload: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    #: ``resolve``: the final status.
    status: str | None = None

    def event(self, verb: RepairVerb, actor: str, reason: str) -> OperatorRepair:
        payload = self.payload
        if verb is RepairVerb.RESOLVE:
            payload = {"status": self.status or "completed"}
        return OperatorRepair(verb=verb, actor=actor, reason=reason, step=self.step,
                              payload=payload, result=self.result)


async def apply_repair(
    store: SagaStore, saga_id: UUID, verb: RepairVerb, *, principal: str, reason: str,
    options: RepairOptions = RepairOptions(),
) -> ApplyResult:
    """Apply ``verb``; returns once the engine accepted it and the transaction committed.

    Raises ``SagaNotFound`` or ``InvalidTransition`` (nothing is written then).
    """
    event = options.event(verb, principal, reason)
    result = await store.apply(saga_id, event, actor=operator_actor(principal))
    audit.info("repair %s saga=%s by=%s status=%s reason=%r", verb.value, saga_id, principal,
               result.status, reason)
    return result
