"""until_stopped: start-up waits end as soon as a stop is asked for."""

from __future__ import annotations

import asyncio

from participant_sdk.stopping import until_stopped


async def test_work_that_finishes_returns_its_result() -> None:
    assert await until_stopped(asyncio.sleep(0, "done"), asyncio.Event()) == (True, "done")


async def test_a_stop_cancels_the_work_at_once() -> None:
    stop = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    asyncio.get_running_loop().call_later(0.05, stop.set)
    async with asyncio.timeout(5):
        assert await until_stopped(forever(), stop) == (False, None)
    assert cancelled.is_set()


async def test_a_stop_asked_before_never_starts_the_work() -> None:
    stop = asyncio.Event()
    stop.set()
    started = []

    async def work() -> None:
        started.append(1)

    assert await until_stopped(work(), stop) == (False, None)
    assert started == []
