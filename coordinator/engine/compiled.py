"""A saga class compiled for the engine: resolved policies and an explicit state machine.

State names: ``start``; for each step ``<key>.<phase>`` with phase ``trying``, ``executing``,
``cancelling`` or ``compensating``; ``confirming`` (all TCC steps confirm together); and the
ends ``completed``, ``compensated``, ``cancelled`` and ``dead``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel

from coordinator.definition import (
    NO_COMPENSATION,
    Guard,
    Mapper,
    Saga,
    SagaStep,
    TccStep,
    resolve_policy,
    validate_saga_class,
)
from coordinator.definition_policies import RetryPolicy
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX, Phase, command_topic, reply_topic

__all__ = ["CompiledSaga", "CompiledStep", "StepKind", "Transition", "compile_saga"]


class StepKind(StrEnum):
    TCC = "tcc"
    SAGA = "saga"


@dataclass(frozen=True)
class CompiledStep:
    """One step with its policies resolved."""

    name: str
    kind: StepKind
    participant: str
    action: str
    #: Compensation action of a saga step; ``None`` for TCC steps and irreversible steps.
    compensation: str | None
    payload: Mapper | None
    rollback_payload: Mapper | None
    when: Guard | None
    retry: RetryPolicy
    finish_retry: RetryPolicy  # confirm retry of a TCC step
    rollback_retry: RetryPolicy  # cancel or compensation retry
    deadline: timedelta
    rollback_deadline: timedelta
    description: str = ""

    @property
    def forward_phase(self) -> Phase:
        return Phase.TRY if self.kind is StepKind.TCC else Phase.ACTION

    @property
    def rollback_phase(self) -> Phase:
        return Phase.CANCEL if self.kind is StepKind.TCC else Phase.COMPENSATE

    @property
    def reversible(self) -> bool:
        return self.kind is StepKind.TCC or self.compensation is not None

    def policy(self, phase: Phase) -> RetryPolicy:
        if phase.is_forward:
            return self.retry
        return self.finish_retry if phase is Phase.CONFIRM else self.rollback_retry

    def deadline_for(self, phase: Phase) -> timedelta:
        return self.deadline if phase.is_forward else self.rollback_deadline

    def action_for(self, phase: Phase) -> str:
        """The envelope's ``action``: always the step's action, whatever the phase.

        Participants route on ``(action, phase)`` (``participant_sdk.handlers``), so a
        compensation is ``phase=compensate`` of the same action; the ``compensation`` name
        documents the undo (JSON export, diagrams) and declares the step reversible.
        """
        del phase
        return self.action

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "participant": self.participant,
            "action": self.action,
            "compensation": self.compensation,
            "reversible": self.reversible,
            "guarded": self.when is not None,
            "retry": self.retry.model_dump(mode="json"),
            "finish_retry": self.finish_retry.model_dump(mode="json")
            if self.kind is StepKind.TCC else None,
            "rollback_retry": self.rollback_retry.model_dump(mode="json")
            if self.reversible else None,
            "deadline_s": self.deadline.total_seconds(),
            "rollback_deadline_s": self.rollback_deadline.total_seconds(),
            "description": self.description,
        }


@dataclass(frozen=True)
class Transition:
    source: str
    target: str
    label: str


@dataclass(frozen=True)
class CompiledSaga:
    """What the engine runs. ``topic_prefix`` decides every command and reply topic."""

    name: str
    version: int
    input_model: type[BaseModel]
    steps: tuple[CompiledStep, ...]
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    saga_class: type[Saga] | None = None
    states: tuple[str, ...] = field(default=())
    transitions: tuple[Transition, ...] = field(default=())

    @property
    def reply_topic(self) -> str:
        return reply_topic(self.topic_prefix)

    def command_topic(self, step: CompiledStep) -> str:
        return command_topic(step.participant, self.topic_prefix)

    @cached_property
    def _by_name(self) -> dict[str, CompiledStep]:
        return {s.name: s for s in self.steps}

    @cached_property
    def order(self) -> dict[str, int]:
        """Position of each step in the declaration."""
        return {s.name: i for i, s in enumerate(self.steps)}

    def step(self, name: str) -> CompiledStep:
        return self._by_name[name]

    def to_json(self) -> dict[str, Any]:
        """The definition and its state machine, JSON-ready."""
        return {
            "name": self.name,
            "version": self.version,
            "topic_prefix": self.topic_prefix,
            "input_schema": self.input_model.model_json_schema(),
            "steps": [s.to_json() for s in self.steps],
            "states": list(self.states),
            "initial": "start",
            "terminal": ["completed", "compensated", "cancelled"],
            "transitions": [
                {"from": t.source, "to": t.target, "on": t.label} for t in self.transitions
            ],
        }


def compile_saga(cls: type[Saga], *, topic_prefix: str = DEFAULT_TOPIC_PREFIX,
                 strict_participants: set[str] | frozenset[str] | None = None) -> CompiledSaga:
    """Validate ``cls`` (again, with the registry's participants) and compile it."""
    validate_saga_class(cls, strict_participants)
    steps = tuple(_compile_step(s) for s in cls.steps)
    from coordinator.engine.machine import build_machine  # machine needs CompiledStep

    states, transitions = build_machine(steps)
    return CompiledSaga(
        name=cls.name,
        version=cls.version,
        input_model=cls.input_model,
        steps=steps,
        topic_prefix=topic_prefix,
        saga_class=cls,
        states=states,
        transitions=transitions,
    )


def _compile_step(spec: TccStep | SagaStep) -> CompiledStep:
    if isinstance(spec, TccStep):
        return CompiledStep(
            name=spec.name, kind=StepKind.TCC, participant=spec.participant,
            action=spec.action, compensation=None, payload=spec.payload,
            rollback_payload=spec.finish_payload, when=spec.when,
            retry=resolve_policy(spec.retry), finish_retry=resolve_policy(spec.confirm_retry),
            rollback_retry=resolve_policy(spec.cancel_retry), deadline=spec.deadline,
            rollback_deadline=spec.rollback_deadline, description=spec.description,
        )
    comp = spec.compensation if isinstance(spec.compensation, str) else None
    assert comp is not None or spec.irreversible or spec.compensation is NO_COMPENSATION
    policy = resolve_policy(spec.compensation_retry)
    return CompiledStep(
        name=spec.name, kind=StepKind.SAGA, participant=spec.participant, action=spec.action,
        compensation=comp, payload=spec.payload, rollback_payload=spec.compensation_payload,
        when=spec.when, retry=resolve_policy(spec.retry), finish_retry=policy,
        rollback_retry=policy, deadline=spec.deadline,
        rollback_deadline=spec.rollback_deadline, description=spec.description,
    )
