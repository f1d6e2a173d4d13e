"""Retry policies: small validated value objects with ``timedelta`` durations.

A policy never reads a clock or a random source. :meth:`RetryPolicy.backoff` takes a seed (the
saga id, step, phase and attempt) and derives its jitter from a hash of it, so that replaying a
saga's history schedules exactly the same timers.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Final, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from participant_sdk.protocol import ErrorKind

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_RETRY",
    "DEFAULT_ROLLBACK_RETRY",
    "RetryPolicy",
    "deterministic_fraction",
]


class RetryPolicy(BaseModel):
    """How often and how fast a command is re-sent after a retryable failure.

    ``max_attempts`` counts the first attempt, so ``max_attempts=1`` means "never retry".
    The delay before attempt ``n + 1`` is ``initial_backoff * multiplier ** (n - 1)``, capped
    at ``max_backoff`` and then shortened by up to ``jitter`` (a fraction) so that sagas that
    failed together do not retry together.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Attempts in all, the first one included. Always bounded: exhausting it ends the phase.
    max_attempts: int = Field(default=3, ge=1, le=1_000_000)
    #: Delay before the second attempt.
    initial_backoff: timedelta = timedelta(seconds=1)
    #: Growth factor of the delay from one attempt to the next.
    multiplier: float = Field(default=2.0, ge=1.0, le=100.0)
    #: Upper bound of any delay.
    max_backoff: timedelta = timedelta(minutes=1)
    #: Fraction (0..1) by which a delay may be shortened, derived from a hash, never random.
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    #: Error kinds that end the phase at once even though the kind itself is retryable.
    non_retryable: frozenset[ErrorKind] = frozenset()

    @model_validator(mode="after")
    def _check_durations(self) -> Self:
        if self.initial_backoff < timedelta(0):
            raise ValueError(f"initial_backoff must not be negative, got {self.initial_backoff}")
        if self.max_backoff < self.initial_backoff:
            raise ValueError(
                f"max_backoff ({self.max_backoff}) must not be shorter than "
                f"initial_backoff ({self.initial_backoff})"
            )
        return self

    def retries(self, kind: ErrorKind) -> bool:
        """Whether a failure of this kind may be retried (attempts permitting)."""
        return kind.retryable and kind not in self.non_retryable

    def exhausted(self, attempts_used: int) -> bool:
        """Whether ``attempts_used`` attempts leave none to make."""
        return attempts_used >= self.max_attempts

    def backoff(self, attempt: int, seed: str) -> timedelta:
        """Delay after failed attempt ``attempt`` (1-based) before the next one."""
        exponent = max(attempt - 1, 0)
        base_s = self.initial_backoff.total_seconds()
        cap_s = self.max_backoff.total_seconds()
        # Cap the exponent first: a huge attempt number must not overflow the float.
        delay_s = cap_s if exponent > 200 else min(base_s * self.multiplier**exponent, cap_s)
        delay_s *= 1.0 - self.jitter * deterministic_fraction(seed)
        # Whole milliseconds keep timer due times exact across JSON round trips.
        return timedelta(milliseconds=round(delay_s * 1000))


def deterministic_fraction(seed: str) -> float:
    """A number in [0, 1) derived from ``seed`` by SHA-256: jitter without randomness."""
    digest = hashlib.sha256(seed.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


#: Forward phases (try, action): a few quick attempts, then the saga rolls back.
DEFAULT_RETRY: Final = RetryPolicy()

#: Confirm, cancel and compensation: retry "forever"-ish with a capped backoff, but bounded.
#: 2,000 attempts at up to 5 minutes apart is about a week before the saga goes dead.
DEFAULT_ROLLBACK_RETRY: Final = RetryPolicy(
    max_attempts=2_000,
    initial_backoff=timedelta(seconds=1),
    multiplier=2.0,
    max_backoff=timedelta(minutes=5),
    jitter=0.2,
)

#: How long the coordinator waits for a reply before counting the attempt as a retryable failure.
DEFAULT_DEADLINE: Final = timedelta(seconds=30)
