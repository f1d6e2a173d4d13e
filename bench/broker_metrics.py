"""The Kafka broker's own request counters, read over JMX (devstack's single broker opens
``SAGAFLOW_KAFKA_JMX_PORT`` on 127.0.0.1).

They are broker-wide: every client of the broker counts, so a window's figures are this
stack's only when nothing else uses the broker. ``bench/kafka_requests.py`` counts one stack's
requests on the clients' side; the two agree on a quiet broker and the broker's counters also
see what no client library reports (its own health probes, every version of every request).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

READER = Path(__file__).resolve().parent / "jmx" / "BrokerRequests.java"

__all__ = ["BrokerCounts", "parse", "read"]


@dataclass(frozen=True)
class BrokerCounts:
    """Cumulative counters since the broker started."""

    requests: dict[str, int] = field(default_factory=dict)
    messages_in: int = 0
    bytes_in: int = 0

    def minus(self, earlier: BrokerCounts) -> BrokerCounts:
        return BrokerCounts(
            {k: v - earlier.requests.get(k, 0) for k, v in self.requests.items()
             if v != earlier.requests.get(k, 0)},
            self.messages_in - earlier.messages_in, self.bytes_in - earlier.bytes_in)

    def per_message(self) -> dict[str, float]:
        """Requests of each type per message produced (empty when none was)."""
        if self.messages_in <= 0:
            return {}
        return {k: v / self.messages_in for k, v in sorted(self.requests.items())}


def parse(text: str) -> BrokerCounts:
    """The reader's output: ``requests<TAB>type<TAB>n`` lines, ``messages_in``, ``bytes_in``."""
    requests: dict[str, int] = {}
    totals = {"messages_in": 0, "bytes_in": 0}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "requests" and len(parts) == 3:
            requests[parts[1]] = int(parts[2])
        elif parts[0] in totals and len(parts) == 2:
            totals[parts[0]] = int(parts[1])
        elif line.strip():
            raise ValueError(f"unexpected line from {READER.name}: {line!r}")
    return BrokerCounts(requests, totals["messages_in"], totals["bytes_in"])


def read(port: int, *, timeout: float = 60.0) -> BrokerCounts:
    """Read the counters now (a Java source-file run: about a second)."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("reading the broker's JMX needs java on PATH")
    done = subprocess.run([java, str(READER), str(port)], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"no JMX answer on 127.0.0.1:{port} (is the broker devstack's, "
                           f"started with its JMX port?): {done.stderr.strip()[-300:]}")
    return parse(done.stdout)
