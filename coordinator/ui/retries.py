"""When a step will try again and when it will give up: what the saga page shows per step.

Read from the snapshot and the saga's timers with the step's own policy, never guessed: the
next attempt is the retry timer's due time (or, with a command in flight, the reply's
deadline); the give-up time is the latest the current phase can last, every attempt left
waiting its whole deadline and its longest backoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from coordinator.engine import CompiledSaga, SagaState
from coordinator.engine.tree import CompiledStep
from coordinator.engine.work import ACTIVE_PHASE
from coordinator.language import RetryPolicy
from coordinator.observability.participants import ParticipantHealth, ParticipantHealthMonitor
from coordinator.store import TimerRecord
from participant_sdk.protocol import Phase

__all__ = ["StepRetry", "phase_policies", "policy_text", "step_retries",
           "waiting_on_no_consumer"]

_PHASE_OF: Final = {step: phase for phase, step in ACTIVE_PHASE.items()}
#: Longest sum worked out term by term (2,000 attempts is the rollback default).
_MAX_TERMS: Final = 100_000


@dataclass(frozen=True, slots=True)
class StepRetry:
    """One step's retry state in its current phase."""

    phase: str
    #: Attempts of the current retry budget used, and the most it allows.
    used: int
    max_attempts: int
    #: ``"retry"`` (a backoff timer) or ``"reply due"`` (a command in flight), and when.
    next_what: str
    next_at: datetime | None
    #: The latest time the phase gives up, if every attempt left times out.
    gives_up_by: datetime | None


def _seconds(delta: timedelta) -> str:
    s = delta.total_seconds()
    if s >= 3600 and s % 3600 == 0:
        return f"{s / 3600:g} h"
    if s >= 60 and s % 60 == 0:
        return f"{s / 60:g} min"
    return f"{s:g} s"


def policy_text(policy: RetryPolicy, deadline: timedelta) -> str:
    """``3 attempts, backoff 1 s times 2 up to 1 min, jitter 10%, 30 s per attempt``."""
    return (f"{policy.max_attempts:,} attempts, backoff {_seconds(policy.initial_backoff)} "
            f"times {policy.multiplier:g} up to {_seconds(policy.max_backoff)}, jitter "
            f"{policy.jitter:.0%}, {_seconds(deadline)} per attempt")


def phase_policies(spec: CompiledStep) -> list[tuple[str, str]]:
    """(phase, policy text) of each phase the step has."""
    phases = ([Phase.TRY, Phase.CONFIRM, Phase.CANCEL] if spec.confirms
              else [Phase.ACTION] + ([Phase.COMPENSATE] if spec.compensable else []))
    return [(p.value, policy_text(spec.policy(p), spec.deadline_for(p))) for p in phases]


def _worst_case(policy: RetryPolicy, deadline: timedelta, first_attempt: int,
                start: datetime) -> datetime:
    """When attempt ``first_attempt`` (sent at ``start``) and every later one have all timed
    out, each after its longest backoff."""
    end = start + deadline
    delay = policy.initial_backoff.total_seconds()
    cap = policy.max_backoff.total_seconds()
    for _ in range(1, first_attempt):  # the backoff after attempt ``first_attempt``
        if delay >= cap:
            break
        delay = min(delay * policy.multiplier, cap)
    for _ in range(first_attempt, min(policy.max_attempts, first_attempt + _MAX_TERMS)):
        end += timedelta(seconds=min(delay, cap)) + deadline
        delay = min(delay * policy.multiplier, cap)
    return end


def step_retries(definition: CompiledSaga, state: SagaState, timers: Sequence[TimerRecord]
                 ) -> dict[str, StepRetry]:
    """The retry state of each step with a command in flight or a retry pending."""
    due = {t.timer_id: t.due_at for t in timers}
    out: dict[str, StepRetry] = {}
    for key in state.active_steps():
        step = state.steps[key]
        try:
            spec = definition.step(step.node)
        except (KeyError, AssertionError):
            continue  # a child saga node or a kind this page does not know
        phase = _PHASE_OF[step.phase]
        policy, deadline = spec.policy(phase), spec.deadline_for(phase)
        used = step.used(phase)
        if step.outstanding is not None:
            at = step.outstanding.sent_at + deadline
            out[key] = StepRetry(phase.value, used, policy.max_attempts, "reply due", at,
                                 _worst_case(policy, deadline, used, step.outstanding.sent_at))
        elif step.retry_timer is not None and step.retry_timer in due:
            at = due[step.retry_timer]
            out[key] = StepRetry(phase.value, used, policy.max_attempts, "retry", at,
                                 _worst_case(policy, deadline, used + 1, at))
    return out


async def waiting_on_no_consumer(monitor: ParticipantHealthMonitor | None,
                                 definition: CompiledSaga, state: SagaState
                                 ) -> list[tuple[str, ParticipantHealth]]:
    """(step, health) of each step in flight whose participant has no live consumer."""
    if monitor is None or not state.active_steps():
        return []
    down = {h.participant: h for h in await monitor.snapshot() if h.down}
    out = []
    for key in state.active_steps():
        try:
            participant = definition.step(state.steps[key].node).participant
        except (KeyError, AssertionError):
            continue
        if participant in down:
            out.append((key, down[participant]))
    return out
