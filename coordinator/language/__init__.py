"""The saga language: what a saga author declares.

Everything a saga class needs comes from here::

    from coordinator.language import ForEach, RetryPolicy, Saga, SagaStep, TccStep

* :mod:`~coordinator.language.steps`: TCC steps and saga steps, and what their mappers see;
* :mod:`~coordinator.language.nodes`: the composites and waits (parallel, for-each, race,
  choice, version guards, child sagas, sleeps, signal waits);
* :mod:`~coordinator.language.flow_nodes`: catch-and-fallback and loops;
* :mod:`~coordinator.language.policies`: retry policies and deadlines;
* :mod:`~coordinator.language.saga`: the :class:`Saga` base class and its validation.

It imports nothing of the engine, the store or the runtime (the layer contract checks it).
"""

from coordinator.language.business_key import BusinessKey
from coordinator.language.flow_nodes import CATCHABLE, Catch, Loop
from coordinator.language.nodes import (
    Branch,
    ChildSaga,
    Choice,
    ForEach,
    Node,
    Parallel,
    Patched,
    Race,
    Sequence,
    Sleep,
    SleepUntil,
    WaitForSignal,
)
from coordinator.language.policies import RetryPolicy
from coordinator.language.saga import Migration, Saga, validate_saga_class
from coordinator.language.search_attributes import SearchAttribute, SearchContext
from coordinator.language.steps import (
    DefinitionError,
    Guard,
    Mapper,
    PolicyLike,
    SagaStep,
    StepContext,
    StepSpec,
    TccStep,
)
from coordinator.language.updates import Update, UpdateContext, UpdateRejected

__all__ = [
    "CATCHABLE",
    "Branch",
    "BusinessKey",
    "Catch",
    "ChildSaga",
    "Choice",
    "DefinitionError",
    "ForEach",
    "Guard",
    "Loop",
    "Mapper",
    "Migration",
    "Node",
    "Parallel",
    "Patched",
    "PolicyLike",
    "Race",
    "RetryPolicy",
    "Saga",
    "SagaStep",
    "SearchAttribute",
    "SearchContext",
    "Sequence",
    "Sleep",
    "SleepUntil",
    "StepContext",
    "StepSpec",
    "TccStep",
    "Update",
    "UpdateContext",
    "UpdateRejected",
    "WaitForSignal",
    "validate_saga_class",
]
