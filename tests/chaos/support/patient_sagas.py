"""The example order sagas with step deadlines longer than a failover scenario's backlog.

Two thousand sagas in flight on two cores wait tens of seconds in the participants' queues.
With the examples' 10 s deadlines most tries time out, are re-sent (adding to the queue) and
finally roll back: the scenario then measures a congestion collapse, not the failover. The
same shapes (linear, parallel, a child saga) with the same names, retries and effects, only
patient, as docs/failover.md advises for a stack under such load.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from coordinator.language.nodes import ChildSaga, Parallel
from coordinator.language.saga import Saga, SagaStep, TccStep
from examples import order_saga

#: Longer than the backlog takes to drain (about a minute on two cores while a broker is lost).
PATIENCE = timedelta(minutes=5)


def _patient_node(node: Any) -> Any:
    if isinstance(node, TccStep | SagaStep):
        return replace(node, deadline=PATIENCE, rollback_deadline=PATIENCE)
    if isinstance(node, Parallel):
        return replace(node, branches=tuple(_patient_node(b) for b in node.branches))
    if isinstance(node, ChildSaga):
        return replace(node, saga=node.saga if isinstance(node.saga, str) else node.saga.name,
                       deadline=PATIENCE)
    raise TypeError(f"no patient form for {type(node).__name__}")


def _patient(saga: type[Saga]) -> type[Saga]:
    """A subclass of ``saga`` with the same name and version, every deadline ``PATIENCE``."""
    return type(saga.__name__, (saga,), {
        "__module__": __name__, "__doc__": saga.__doc__,
        "steps": tuple(_patient_node(n) for n in saga.steps),
    })


OrderSaga = _patient(order_saga.OrderSaga)
ParallelOrderSaga = _patient(order_saga.ParallelOrderSaga)
FulfilmentSaga = _patient(order_saga.FulfilmentSaga)
NestedOrderSaga = _patient(order_saga.NestedOrderSaga)

#: ``ChaosStack`` sagas (import paths) of the failover scenarios.
SAGAS = tuple(f"{__name__}:{cls.__name__}" for cls in
              (OrderSaga, ParallelOrderSaga, NestedOrderSaga, FulfilmentSaga))
