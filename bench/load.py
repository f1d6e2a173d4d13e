"""Saga load drivers: closed loop (sustained rate) and open loop (latency at a fixed rate).

Sagas are started through :meth:`SagaStore.start_saga`, as the API does. One watcher task
polls the ``sagas`` rows of the sagas still in flight (a primary-key lookup of those ids only)
when the stack's saga-end hints name one of them (or on a timer, for a stack that sends none)
and resolves each saga when its status is terminal. Latency is the terminal row's
``updated_at`` minus the moment the saga was due to start, so a slow start counts against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from coordinator.runtime.hints.results import CHANNEL as SAGA_END_CHANNEL
from coordinator.runtime.hints.results import LISTENER_APP_NAME
from coordinator.store import SagaStore

TERMINAL = ["completed", "compensated", "cancelled"]
FAIL_EVERY = 10  # one saga in ten fails at one try and is cancelled


def saga_input(i: int, steps: int, tag: str) -> dict[str, Any]:
    """The i-th saga's input: fresh customer and SKU rows (no hot rows); every tenth fails.

    A failing saga is refused by inventory (``OOS-`` SKU) at its second try, or by payments
    (customer ``broke``) when the saga has a single step.
    """
    fail = i % FAIL_EVERY == FAIL_EVERY - 1
    return {
        "customer_id": "broke" if fail and steps == 1 else f"c{tag}-{i}",
        "amount_cents": 100,
        "sku": f"OOS-{tag}-{i}" if fail else f"SKU-{tag}-{i}",
        "quantity": 1,
        "address": "1 Main St",
    }


@dataclass
class Outcome:
    status: str
    latency_s: float
    finished_wall: float


#: Once saga-end hints arrive, the watcher polls on them and its timer is only a fallback.
HINTED_FALLBACK_S = 0.1


@dataclass
class Watcher:
    """Resolves a future per saga id when its row reaches a terminal status.

    It LISTENs for the stack's saga-end hints (``coordinator.runtime.hints.results``): a hint
    naming a saga it waits for triggers a poll at once. Until a first hint arrives (a stack that
    sends none) it polls every ``interval``; afterwards at most every ``HINTED_FALLBACK_S`` by
    itself. ``noticed_s`` holds, per saga resolved after a hint named it, the time from its
    terminal ``updated_at`` to the hint's arrival: what a result waiter sees of the end.
    """

    conn: asyncpg.Connection
    interval: float = 0.02
    pending: dict[uuid.UUID, tuple[float, asyncio.Future[Outcome]]] = field(default_factory=dict)
    polls: int = 0
    hints: int = 0
    noticed_s: list[float] = field(default_factory=list)
    _heard: dict[uuid.UUID, float] = field(default_factory=dict)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def watch(self, saga_id: uuid.UUID, due_wall: float) -> asyncio.Future[Outcome]:
        fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.pending[saga_id] = (due_wall, fut)
        return fut

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _on_hint(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.hints += 1
        now = time.time()
        for text in payload.split():
            try:
                saga_id = uuid.UUID(text)
            except ValueError:  # not a hint of the stack's
                continue
            if saga_id in self.pending:
                self._heard.setdefault(saga_id, now)
                self._wake.set()

    async def _run(self) -> None:
        await self.conn.add_listener(SAGA_END_CHANNEL, self._on_hint)
        while True:
            wait = max(self.interval, HINTED_FALLBACK_S) if self.hints else self.interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()  # before the poll: a hint during it triggers the next one
            if not self.pending:
                continue
            rows = await self.conn.fetch(
                "SELECT id, status, updated_at FROM sagas WHERE id = ANY($1::uuid[])"
                " AND status = ANY($2::text[])", list(self.pending), TERMINAL)
            self.polls += 1
            now = time.time()
            for row in rows:
                due, fut = self.pending.pop(row["id"])
                finished = row["updated_at"].timestamp()
                heard = self._heard.pop(row["id"], None)
                if heard is not None:
                    self.noticed_s.append(heard - finished)
                if not fut.done():
                    fut.set_result(Outcome(row["status"], finished - due, now))


async def watcher_connection(dsn: str) -> asyncpg.Connection:
    """The watcher's connection, named as a saga-end listener so that the stack hints it."""
    return await asyncpg.connect(dsn, server_settings={
        "application_name": LISTENER_APP_NAME.replace("%", "bench")})


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


@dataclass
class LoadResult:
    started: int = 0
    finished: int = 0
    in_window: int = 0
    window_s: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    watcher_polls: int = 0
    #: Seconds from each saga's end to the saga-end hint reaching the driver.
    noticed_s: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.in_window / self.window_s if self.window_s else 0.0

    def latency_ms(self) -> dict[str, float]:
        return _ms_stats(self.latencies_s)

    def noticed_ms(self) -> dict[str, float]:
        return _ms_stats(self.noticed_s)


def _ms_stats(seconds: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in seconds]
    return {"p50": percentile(ms, 50), "p95": percentile(ms, 95), "p99": percentile(ms, 99),
            "max": max(ms) if ms else float("nan"), "count": float(len(ms))}


class Driver:
    """Starts sagas of one type and follows them to a terminal status."""

    def __init__(self, store: SagaStore, watch_conn: asyncpg.Connection, saga_type: str,
                 steps: int, tag: str, poll_interval: float = 0.02) -> None:
        self.store = store
        self.saga_type = saga_type
        self.steps = steps
        self.tag = tag
        self.watcher = Watcher(watch_conn, interval=poll_interval)
        self._ids = itertools.count()
        self.started_ids: list[uuid.UUID] = []

    async def start_one(self, due_wall: float) -> asyncio.Future[Outcome]:
        i = next(self._ids)
        sid = uuid.uuid4()
        fut = self.watcher.watch(sid, due_wall)
        self.started_ids.append(sid)
        await self.store.start_saga(self.saga_type, saga_input(i, self.steps, self.tag),
                                    saga_id=sid, actor="bench", trace_context={})
        return fut

    async def warm_up(self, count: int, limit_s: float) -> None:
        """Run ``count`` sagas to the end: each participant has joined its group afterwards."""
        self.watcher.start()
        futs = [await self.start_one(time.time()) for _ in range(count)]
        async with asyncio.timeout(limit_s):
            await asyncio.gather(*futs)

    async def closed_loop(self, concurrency: int, warmup_s: float, duration_s: float,
                          on_window: Callable[[str], Any]) -> LoadResult:
        """``concurrency`` sagas always in flight; count those finishing inside the window."""
        result = LoadResult(window_s=duration_s)
        self.watcher.noticed_s = result.noticed_s
        t0 = time.monotonic()
        w_start, w_end = t0 + warmup_s, t0 + warmup_s + duration_s
        marks = {"start": False, "end": False}
        stop = asyncio.Event()

        async def lane() -> None:
            while not stop.is_set():
                fut = await self.start_one(time.time())
                result.started += 1
                out = await fut
                result.finished += 1
                now = time.monotonic()
                if w_start <= now < w_end:
                    result.in_window += 1
                    result.statuses[out.status] = result.statuses.get(out.status, 0) + 1
                    result.latencies_s.append(out.latency_s)

        async def clock() -> None:
            await asyncio.sleep(max(0.0, w_start - time.monotonic()))
            await on_window("start")
            marks["start"] = True
            await asyncio.sleep(max(0.0, w_end - time.monotonic()))
            await on_window("end")
            marks["end"] = True
            stop.set()

        lanes = [asyncio.create_task(lane()) for _ in range(concurrency)]
        clock_task = asyncio.create_task(clock())
        try:
            await clock_task
            async with asyncio.timeout(120):
                await asyncio.gather(*lanes)
        finally:
            for task in [*lanes, clock_task]:
                task.cancel()
            await asyncio.gather(*lanes, clock_task, return_exceptions=True)
        result.watcher_polls = self.watcher.polls
        return result

    async def open_loop(self, rate: float, duration_s: float, drain_timeout: float = 120
                        ) -> LoadResult:
        """Start sagas at ``rate`` per second for ``duration_s``, whatever is in flight."""
        result = LoadResult(window_s=duration_s)
        self.watcher.noticed_s = result.noticed_s
        total = int(rate * duration_s)
        t0_wall, t0 = time.time(), time.monotonic()
        futs: list[asyncio.Future[Outcome]] = []
        starts: list[asyncio.Task[asyncio.Future[Outcome]]] = []
        for n in range(total):
            due = t0 + n / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            starts.append(asyncio.create_task(self.start_one(t0_wall + n / rate)))
            result.started += 1
        futs = list(await asyncio.gather(*starts))
        async with asyncio.timeout(drain_timeout):
            outcomes = await asyncio.gather(*futs)
        for out in outcomes:
            result.finished += 1
            result.in_window += 1
            result.statuses[out.status] = result.statuses.get(out.status, 0) + 1
            result.latencies_s.append(out.latency_s)
        result.window_s = max(o.finished_wall for o in outcomes) - t0_wall if outcomes else 0.0
        return result
