"""A limit on failed credential checks, per client address and per presented credential.

In-process (each API replica counts its own), so no new service: behind N replicas an attacker
gets at most N times the budget. Credentials are keyed by a digest, never kept in clear.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import deque
from collections.abc import Callable
from datetime import timedelta

__all__ = ["FailureLimiter", "limiter_keys"]

#: Most keys remembered; beyond it the oldest are forgotten (memory stays bounded under a
#: flood of made-up credentials, which the address key still limits).
MAX_KEYS = 100_000


def limiter_keys(client: str | None, credential: str) -> tuple[str, str]:
    """The address key and the credential key of one attempt."""
    digest = hashlib.sha256(credential.encode()).hexdigest()[:32]
    return f"addr:{client or 'unknown'}", f"cred:{digest}"


class FailureLimiter:
    """At most ``max_failures`` failures per key within ``window`` (sliding)."""

    def __init__(self, max_failures: int, window: timedelta,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self._window = window.total_seconds()
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, *keys: str) -> int | None:
        """Seconds until one of ``keys`` may try again, or None when none is blocked."""
        if self.max_failures <= 0:
            return None
        now = self._clock()
        wait = 0.0
        for key in keys:
            times = self._recent(key, now)
            if times is not None and len(times) >= self.max_failures:
                wait = max(wait, times[0] + self._window - now)
        return max(1, math.ceil(wait)) if wait > 0 else None

    def failed(self, *keys: str) -> None:
        if self.max_failures <= 0:
            return
        now = self._clock()
        for key in keys:
            times = self._recent(key, now)
            if times is None:
                if len(self._failures) >= MAX_KEYS:
                    del self._failures[next(iter(self._failures))]
                times = self._failures[key] = deque(maxlen=self.max_failures)
            times.append(now)

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self._window:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times
