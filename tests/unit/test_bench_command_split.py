"""bench.command_split: py-spy's collapsed stacks split by part of a participant command."""

from __future__ import annotations

from bench.command_split import EVENT_LOOP, parse, part_of, split

LOOP = ("<module> (bench/participants.py:119);main (participant_sdk/runner.py:413);"
        "BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80)")
SAMPLE = [
    f"{LOOP};_lane (participant_sdk/runner.py:273);insert (participant_sdk/barrier.py:96);"
    "Connection.execute (asyncpg/connection.py:377) 6",
    f"{LOOP};_lane (participant_sdk/runner.py:273);hold (examples/services/payments.py:40);"
    "Connection.execute (asyncpg/connection.py:377) 3",
    f"{LOOP};Sender._sender_routine (aiokafka/producer/sender.py:99) 5",
    f"{LOOP};_lane (participant_sdk/runner.py:273) 2",
    f"{LOOP};_read_ready (asyncio/selector_events.py:995) 4",
    f"{LOOP};write (asyncio/selector_events.py:1057) 30",
    "BaseEventLoop._run_once (asyncio/base_events.py:1907);"
    "EpollSelector.select (selectors.py:468) 50",
    "not a sample line",
]


def test_parts_waits_and_shares() -> None:
    samples = parse(SAMPLE)
    assert len(samples) == 7
    assert [part_of(frames) for frames, _ in samples] == [
        "barrier SQL", "handler (business SQL)", "Kafka produce",
        "SDK glue (runner, executor, processor)", EVENT_LOOP, None, None]
    shares, busy, waits = split(samples)
    assert (busy, waits) == (20, 80)
    assert shares["barrier SQL"] == 0.3 and shares[EVENT_LOOP] == 0.2
    assert abs(sum(shares.values()) - 1) < 1e-9
