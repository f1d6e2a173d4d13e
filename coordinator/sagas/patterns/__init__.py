"""The pattern library: parameterised templates for the sagas most teams write.

Each factory returns a saga class, validated like a written one, to register as it is or to
subclass no further (give it your own ``name`` and ``version``)::

    from coordinator.sagas.patterns import order_saga
    OrderSaga = order_saga("order", version=3, shipping=None)

Each template has a version and change log of its own (:data:`PATTERNS`); the class it builds
records it in ``pattern`` (``"order@1"``). Diagrams: ``docs/patterns.md``.
"""

from coordinator.sagas.patterns.approval import (
    APPROVAL,
    ApprovalInput,
    approval_saga,
    participant_approval_saga,
)
from coordinator.sagas.patterns.catalog import Pattern
from coordinator.sagas.patterns.etl import ETL_BATCH, EtlBatchInput, etl_batch_saga
from coordinator.sagas.patterns.onboarding import ONBOARDING, OnboardingInput, onboarding_saga
from coordinator.sagas.patterns.order import ORDER, OrderInput, OrderLine, order_saga
from coordinator.sagas.patterns.refund import REFUND, RefundInput, refund_saga

#: Every template, by name.
PATTERNS: dict[str, Pattern] = {p.name: p for p in (APPROVAL, ORDER, REFUND, ETL_BATCH,
                                                     ONBOARDING)}

__all__ = [
    "PATTERNS",
    "ApprovalInput",
    "EtlBatchInput",
    "OnboardingInput",
    "OrderInput",
    "OrderLine",
    "Pattern",
    "RefundInput",
    "approval_saga",
    "etl_batch_saga",
    "onboarding_saga",
    "order_saga",
    "participant_approval_saga",
    "refund_saga",
]
