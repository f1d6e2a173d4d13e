"""The worker's idle loops: the timer loop's queries, the background offset committer."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError
from aiokafka.structs import OffsetAndMetadata

from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.worker import Worker
from coordinator.runtime.worker.offset_commits import OffsetCommitter


class TimerStore:
    """The two store calls of the timer loop, counted; ``due`` timers fire when claimed."""

    def __init__(self) -> None:
        self.due: list[datetime] = []
        self.fire_calls = 0
        self.next_calls = 0

    async def fire_due_timers(self, *, now: datetime | None = None, limit: int = 100) -> int:
        self.fire_calls += 1
        at = datetime.now(UTC)
        fired = [d for d in self.due if d <= at][:limit]
        self.due = [d for d in self.due if d not in fired]
        return len(fired)

    async def next_timer_due(self) -> datetime | None:
        self.next_calls += 1
        return min(self.due, default=None)


async def test_idle_timer_loop_runs_one_query_per_wake_and_fires_when_due() -> None:
    store = TimerStore()
    settings = CoordinatorSettings(timer_max_idle=timedelta(milliseconds=100))
    worker = Worker(settings, registry=None, store=store)  # type: ignore[arg-type]
    task = asyncio.create_task(worker._timer_loop())
    try:
        await asyncio.sleep(0.55)
        # One claim at start (timers may be overdue), then only min(due_at), every 100 ms.
        assert store.fire_calls == 1
        assert 4 <= store.next_calls <= 7
        store.due.append(datetime.now(UTC) + timedelta(milliseconds=150))
        await asyncio.sleep(0.45)
        assert store.due == []
        assert worker.timers_fired == 1
        assert store.fire_calls == 2  # claimed once, when it was due
        # A timer this process schedules earlier than the loop's sleep wakes it.
        store.due.append(datetime.now(UTC))
        worker._on_timer_scheduled(store.due[0])
        await asyncio.sleep(0.03)
        assert worker.timers_fired == 2
    finally:
        worker._stopping.set()
        worker._wake.set()
        await asyncio.wait_for(task, 2)


class Hints:
    listening = True


async def test_a_hint_wakes_the_long_sleep_and_without_hints_the_loops_sleep_at_most_1s() -> None:
    store = TimerStore()
    worker = Worker(CoordinatorSettings(timer_max_idle=timedelta(seconds=30)), registry=None,
                    store=store)  # type: ignore[arg-type]
    assert worker._max_idle() == 1.0  # no hint listener: as before hints existed
    worker._hints = Hints()  # type: ignore[assignment]
    assert worker._max_idle() == 30.0
    task = asyncio.create_task(worker._timer_loop())
    try:
        await asyncio.sleep(0.1)
        assert (store.fire_calls, store.next_calls) == (1, 1)  # now asleep for 30 s
        store.due.append(datetime.now(UTC))  # written by another process, which hints
        worker._on_hint()
        await asyncio.sleep(0.05)
        assert worker.timers_fired == 1
        assert worker._schedules_changed.is_set()  # the schedule loop looks again too
        Hints.listening = False
        assert worker._max_idle() == 1.0  # the hint connection is down
    finally:
        Hints.listening = True
        worker._stopping.set()
        worker._wake.set()
        await asyncio.wait_for(task, 2)


class Consumer:
    def __init__(self, fail: int = 0) -> None:
        self.commits: list[dict[TopicPartition, int]] = []
        self.fail = fail
        self.release = asyncio.Event()
        self.release.set()

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        await self.release.wait()
        if self.fail:
            self.fail -= 1
            raise CommitFailedError("rebalanced")
        self.commits.append({tp: o.offset for tp, o in offsets.items()})


TP0, TP1 = TopicPartition("r", 0), TopicPartition("r", 1)


def _at(offset: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, "")


async def test_offsets_are_committed_in_the_background_latest_per_partition() -> None:
    consumer = Consumer()
    committer = OffsetCommitter(consumer)
    await committer.start()
    try:
        consumer.release.clear()  # the first commit is slow: later submissions coalesce
        committer.submit({TP0: _at(5)})
        await asyncio.sleep(0.01)
        committer.submit({TP0: _at(9), TP1: _at(3)})
        committer.submit({TP0: _at(7)})  # an older offset never moves a partition back
        consumer.release.set()
        await asyncio.wait_for(committer.flush(), 1)
        assert consumer.commits == [{TP0: 5}, {TP0: 9, TP1: 3}]
    finally:
        await committer.stop()


async def test_with_an_interval_the_batches_of_that_interval_share_one_commit() -> None:
    consumer = Consumer()
    committer = OffsetCommitter(consumer, interval=0.2)
    await committer.start()
    try:
        committer.submit({TP0: _at(1)})
        await asyncio.sleep(0.05)  # committed at once: nothing was committed before
        assert consumer.commits == [{TP0: 1}]
        for offset in range(2, 12):  # ten batches in the next interval: one commit
            committer.submit({TP0: _at(offset), TP1: _at(offset)})
            await asyncio.sleep(0.005)
        assert consumer.commits == [{TP0: 1}]
        await asyncio.wait_for(committer.flush(), 1)
        assert consumer.commits == [{TP0: 1}, {TP0: 11, TP1: 11}]
        committer.submit({TP0: _at(12)})
    finally:
        await asyncio.wait_for(committer.stop(), 0.1)  # stop does not wait for the interval
    assert consumer.commits[-1] == {TP0: 12}


async def test_a_failed_commit_is_logged_and_the_committer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = Consumer(fail=1)
    committer = OffsetCommitter(consumer)
    await committer.start()
    committer.submit({TP0: _at(1)})
    await asyncio.wait_for(committer.flush(), 1)
    assert "offset commit failed" in caplog.text
    committer.submit({TP0: _at(2)})
    consumer.release.clear()
    stop = asyncio.create_task(committer.stop())  # what is pending is committed first
    await asyncio.sleep(0.01)
    consumer.release.set()
    await asyncio.wait_for(stop, 1)
    assert consumer.commits == [{TP0: 2}]


async def test_an_idle_participant_commit_loop_sleeps_until_a_command_finishes() -> None:
    from participant_sdk import ParticipantRunner, ParticipantSettings
    from tests.unit.test_sdk_units import Demo

    runner = ParticipantRunner(Demo(), ParticipantSettings(
        dsn="postgresql://unused", commit_interval=timedelta(milliseconds=50)))
    calls = 0

    async def commit(partitions: object = None) -> None:
        nonlocal calls
        calls += 1

    runner._commit = commit  # type: ignore[method-assign]
    task = asyncio.create_task(runner._commit_loop())
    try:
        await asyncio.sleep(0.3)
        assert calls == 0  # idle: no timer wake-ups, no commit attempts
        runner._uncommitted.set()  # what a lane does when a command finished
        await asyncio.sleep(0.12)
        assert calls == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_max_pending_replies_commit_before_the_interval_is_over() -> None:
    consumer = Consumer()
    committer = OffsetCommitter(consumer, interval=5.0, max_pending=10)
    await committer.start()
    try:
        committer.submit({TP0: _at(1)})
        await asyncio.sleep(0.05)
        assert consumer.commits == [{TP0: 1}]  # nothing committed before: at once
        committer.submit({TP0: _at(5)}, count=4)
        await asyncio.sleep(0.05)
        assert consumer.commits == [{TP0: 1}]  # 4 pending < 10: waits for the interval
        committer.submit({TP0: _at(11)}, count=6)  # 10 pending: commits now, not in 5 s
        await asyncio.wait_for(committer.flush(), 1)
        assert consumer.commits == [{TP0: 1}, {TP0: 11}]
        committer.submit({TP0: _at(12)}, count=1)
        await asyncio.sleep(0.05)
        assert consumer.commits == [{TP0: 1}, {TP0: 11}]  # the count started over
    finally:
        await asyncio.wait_for(committer.stop(), 0.5)
    assert consumer.commits[-1] == {TP0: 12}


async def test_a_participant_commits_early_once_commit_max_pending_commands_finished() -> None:
    from participant_sdk import ParticipantRunner, ParticipantSettings
    from tests.unit.test_sdk_units import Demo

    runner = ParticipantRunner(Demo(), ParticipantSettings(
        dsn="postgresql://unused", commit_interval=timedelta(seconds=5), commit_max_pending=3))
    calls = 0

    async def commit(partitions: object = None) -> None:
        nonlocal calls
        calls += 1

    runner._commit = commit  # type: ignore[method-assign]
    task = asyncio.create_task(runner._commit_loop())
    try:
        runner._command_finished(TP0, 0)
        runner._command_finished(TP0, 1)
        await asyncio.sleep(0.1)
        assert calls == 0  # 2 < 3 finished: waits for the 5 s interval
        runner._command_finished(TP0, 2)
        await asyncio.sleep(0.1)
        assert calls == 1
        runner._command_finished(TP0, 3)
        await asyncio.sleep(0.1)
        assert calls == 1  # the count started over
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
