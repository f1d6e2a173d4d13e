"""Where a participant's CPU goes, per part of a command, from a py-spy sample.

``python -m bench.command_split FILE...`` reads py-spy's collapsed stacks (``py-spy record
--nonblocking -r 200 -f raw -p PID``, taken while the participant serves load: ``pip install
py-spy``, not a dependency) and prints the share of each part of the command path: Kafka
consume and produce, the barrier's SQL, the handler's SQL, BEGIN/COMMIT, the pool, decoding,
the reply, tracing, metrics, the SDK's own glue and the event loop.

Samples whose innermost frame is the socket ``send`` or the ``epoll`` wait are left out and
counted apart: on a loaded machine a sampler sees a process preempted inside ``send`` (the
woken receiver takes the CPU) as busy there, while ``/proc`` shows a participant's CPU is
~88% user time. cProfile (``python -m bench --profile``) measures wall time and has the same
bias, plus its per-call overhead.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

#: (part, marker): a sample belongs to the first part whose marker is in one of its frames
#: below the event loop (more specific parts first).
PARTS: tuple[tuple[str, str], ...] = (
    ("barrier SQL", "participant_sdk/barrier.py"),
    ("handler (business SQL)", "examples/"),
    ("handler (business SQL)", "bench/participants.py"),
    ("BEGIN/COMMIT", "asyncpg/transaction.py"),
    ("pool acquire/release", "asyncpg/pool.py"),
    ("Kafka produce", "aiokafka/producer"),
    ("Kafka consume", "aiokafka/consumer"),
    ("Kafka other (connection, group)", "aiokafka/"),
    ("tracing", "participant_sdk/trac"),
    ("metrics", "prometheus_client"),
    ("metrics", "participant_sdk/metrics.py"),
    ("decode and validate", "decode_command"),
    ("decode and validate", "Handler.parse"),
    ("decode and validate", "_decoded"),
    ("reply build and encode", "make_reply"),
    ("reply build and encode", "reply_message_id"),
    ("reply build and encode", "envelope_headers"),
    ("reply build and encode", "encode (participant_sdk"),
    ("asyncpg (receive, protocol)", "asyncpg/"),
    ("logging", "logging/"),
    ("SDK glue (runner, executor, processor)", "participant_sdk/"),
)
EVENT_LOOP = "event loop (asyncio, socket receive)"
_WAITS = ("selectors.py", "selector_events.py:1057")


def parse(lines: Iterable[str]) -> list[tuple[list[str], int]]:
    """Collapsed stacks (``frame;frame;... count``) as (frames, count)."""
    out: list[tuple[list[str], int]] = []
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def part_of(frames: list[str]) -> str | None:
    """The part a sample belongs to; None for a send or epoll wait."""
    leaf = frames[-1]
    if any(w in leaf for w in _WAITS) and ("select" in leaf or "write" in leaf):
        return None
    start = next((i for i, f in enumerate(frames) if "_run_once" in f), 0)
    below = ";".join(frames[start:])
    for name, marker in PARTS:
        if marker in below:
            return name
    return EVENT_LOOP


def split(samples: list[tuple[list[str], int]]) -> tuple[dict[str, float], int, int]:
    """Share of each part (of the samples outside waits), those samples, the waits."""
    parts: Counter[str] = Counter()
    waits = 0
    for frames, count in samples:
        part = part_of(frames)
        if part is None:
            waits += count
        else:
            parts[part] += count
    busy = sum(parts.values())
    return {k: v / busy for k, v in parts.most_common()} if busy else {}, busy, waits


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench.command_split PY_SPY_RAW...", file=sys.stderr)
        return 2
    for name in argv:
        shares, busy, waits = split(parse(Path(name).read_text().splitlines()))
        print(f"{name}: {busy} samples ({waits} more in send/epoll, left out)")
        for part, share in shares.items():
            print(f"  {share * 100:5.1f}%  {part}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
