"""``python bench/kafka_requests.py OUT.json MODULE [ARGS...]``: run ``python -m MODULE`` and
count every request its Kafka clients send to the broker, by request type.

The bench's ``count_kafka`` stacks start every process through this file (by path, so a
``repo=`` variant's older checkout is counted the same way). Counting on the clients' side is
what isolates one stack on a broker that other test runs share: the broker's own JMX request
metrics (``kafka.network:type=RequestMetrics``, read by ``bench/broker_metrics.py``) are
broker-wide. Every
request an aiokafka client sends goes through ``AIOKafkaConnection.send``; Fetch answers
that carried no record are counted apart (``FetchEmpty``): the broker did the work for
nothing. The counts are written to OUT.json (atomically) whenever they changed, at most
every 50 ms, from a daemon thread; stdlib and aiokafka only.
"""

from __future__ import annotations

import collections
import json
import os
import runpy
import sys
import threading
import time
from typing import Any

COUNTS: collections.Counter[str] = collections.Counter()


def _records_empty(response: Any) -> bool:
    """True when no partition of a FetchResponse carried a record (the records blob is the
    last field of each partition entry in every version)."""
    try:
        return all(not part[-1] for _topic, parts in response.topics for part in parts)
    except (AttributeError, TypeError, IndexError):
        return False


def install(path: str) -> None:
    """Patch aiokafka's connection to count requests; dump the counts to ``path``."""
    from aiokafka.conn import AIOKafkaConnection

    original = AIOKafkaConnection.send

    def send(self: Any, request: Any, expect_response: bool = True) -> Any:
        name = type(request).__name__.removesuffix("Request") or "?"
        awaitable = original(self, request, expect_response)
        COUNTS[name] += 1
        if name != "Fetch" or not expect_response:
            return awaitable

        async def fetched() -> Any:
            response = await awaitable
            if _records_empty(response):
                COUNTS["FetchEmpty"] += 1
            return response

        return fetched()

    AIOKafkaConnection.send = send  # type: ignore[method-assign]
    threading.Thread(target=_dump_forever, args=(path,), daemon=True,
                     name="kafka-request-counts").start()


def _dump(path: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(dict(COUNTS), f)
    os.replace(tmp, path)


def _dump_forever(path: str) -> None:
    last: dict[str, int] = {}
    while True:
        now = dict(COUNTS)
        if now != last:
            try:
                _dump(path)
            except OSError:  # the folder went (the run is over): nothing to report to
                return
            last = now
        time.sleep(0.05)


def read_counts(path: str) -> dict[str, int]:
    """One process's counts so far (empty before its first request)."""
    try:
        with open(path) as f:
            return {str(k): int(v) for k, v in json.load(f).items()}
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    # Run by path: drop this folder from the import path (its module names are the bench's).
    sys.path.pop(0)
    out, module, *rest = sys.argv[1:]
    install(out)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
