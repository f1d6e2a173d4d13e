"""How a failover looks from the sagas: in flight at the fault, time until they progress
again, and the throughput dip, sampled from the coordinator's database while the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import asyncpg

from tests.chaos.support.driver import SETTLED

_COUNTS = """
SELECT count(*) AS stored, count(*) FILTER (WHERE status = ANY($1::text[])) AS settled,
       coalesce(sum(history_seq), 0)::bigint AS events
FROM sagas WHERE parent_id IS NULL
"""


@dataclass
class Sample:
    at: float  # time.monotonic()
    stored: int
    settled: int
    #: History events recorded by these sagas, the measure of progress: it grows with every
    #: step, while a backlog started at once moves through its steps in lockstep and settles
    #: in a burst (``settled`` may go from none to nearly all between two samples).
    events: int


@dataclass
class ProgressSampler:
    """Count stored and settled top-level sagas every ``interval`` seconds.

    Database errors (the primary gone, the standby not yet promoted) just leave a gap.
    """

    dsn: str
    interval: float = 0.25
    samples: list[Sample] = field(default_factory=list)
    fault_at: float | None = None
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        conn: asyncpg.Connection | None = None
        while True:
            try:
                if conn is None or conn.is_closed():
                    conn = await asyncpg.connect(self.dsn, timeout=2)
                row = await asyncio.wait_for(conn.fetchrow(_COUNTS, list(SETTLED)), 2)
                assert row is not None
                self.samples.append(
                    Sample(time.monotonic(), row["stored"], row["settled"], row["events"]))
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                if conn is not None:
                    conn.terminate()
                conn = None
            await asyncio.sleep(self.interval)

    async def wait_progress(
        self, in_flight: int, *, advanced: int, timeout: float  # noqa: ASYNC109
    ) -> Sample:
        """Wait until ``in_flight`` sagas are stored and not settled while the stack is moving:
        they recorded ``advanced`` more history events than at the first sample (see
        ``Sample.events``). The sample that shows it."""
        began = time.monotonic()
        while time.monotonic() < began + timeout:
            if self.samples:
                first, last = self.samples[0], self.samples[-1]
                if (self.in_flight(last) >= in_flight
                        and last.events - first.events >= advanced):
                    return last
            await asyncio.sleep(self.interval / 2)
        raise AssertionError(
            f"never {in_flight} sagas in flight with {advanced} events recorded "
            f"(first sample {self.samples[0] if self.samples else None}, "
            f"last {self.samples[-1] if self.samples else None})")

    @staticmethod
    def in_flight(sample: Sample) -> int:
        return sample.stored - sample.settled

    def mark_fault(self) -> None:
        self.fault_at = time.monotonic()

    def timeline(self, every: float = 5.0) -> str:
        """History events and settled sagas per ``every`` seconds, relative to the fault."""
        assert self.fault_at is not None
        marks, next_at, prev = [], self.samples[0].at, self.samples[0]
        for s in self.samples:
            if s.at >= next_at:
                marks.append(f"{s.at - self.fault_at:+.0f}s:{s.events - prev.events}"
                             f"/{s.settled - prev.settled}")
                prev, next_at = s, s.at + every
        return "events/settled " + " ".join(marks)

    def figures(self, window: float = 10.0) -> dict[str, float]:
        """The recovery figures (seconds, sagas, history events/s) of the run around the fault;
        progress is ``Sample.events``.

        * ``in_flight_at_fault``: stored and not settled at the last sample before the fault;
        * ``stall_s``: from the fault to the first sample with more events than then;
        * ``rate_before``: events per second in the ``window`` before the fault;
        * ``rate_after``: the same in the ``window`` after the fault (the dip);
        * ``recovered_s``: from the fault until a 2 s stretch runs at half ``rate_before``;
        * ``longest_pause_s``: the longest stretch without an event in the minute after the
          fault (partitions or shards the fault did not touch may keep moving at first).
        """
        assert self.fault_at is not None, "no fault marked"
        fault = self.fault_at
        before = [s for s in self.samples if s.at <= fault]
        after = [s for s in self.samples if s.at > fault]
        assert before and after, "no samples on both sides of the fault"
        last = before[-1]
        moved = next((s for s in after if s.events > last.events), None)
        first = next((s for s in before if s.at >= fault - window), before[0])
        span = max(last.at - first.at, 0.001)
        rate_before = (last.events - first.events) / span
        end = [s for s in after if s.at <= fault + window]
        rate_after = ((end[-1].events - last.events) / window) if end else 0.0
        recovered = next(
            (s.at - fault for s in after
             for t in after if 1.9 <= t.at - s.at <= 2.1
             and (t.events - s.events) / (t.at - s.at) >= rate_before / 2),
            float("nan"))
        pause, since = 0.0, fault
        for prev, s in zip([last, *after], after, strict=False):
            if s.at > fault + 60:
                break
            if s.events > prev.events:
                since = s.at
            pause = max(pause, s.at - since)
        return {
            "in_flight_at_fault": float(self.in_flight(last)),
            "longest_pause_s": round(pause, 2),
            "stall_s": round(moved.at - fault, 2) if moved else float("nan"),
            "rate_before": round(rate_before, 1),
            "rate_after": round(rate_after, 1),
            "recovered_s": round(recovered, 2),
        }
