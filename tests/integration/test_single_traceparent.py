"""With tracing on, every message on the wire carries exactly one traceparent: the saga's.

The aiokafka instrumentation used to append a second, unsampled one on every send; a client
that keeps the last header then continued a dead trace. Real Postgres, Kafka, relay and SDK
participant, in a subprocess because a tracer provider is process-wide.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from participant_sdk.protocol import command_topic, reply_topic
from tests.integration.test_worker_support import create_topics

pytestmark = pytest.mark.integration


async def test_commands_and_replies_carry_one_traceparent_continuing_the_saga(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    await create_topics(kafka_bootstrap, {command_topic("probe", topic_prefix): 1,
                                          reply_topic(topic_prefix): 1})
    out_file = tmp_path / "headers.json"
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "false"}
    env.pop("OTEL_TRACES_SAMPLER", None)
    await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.integration._traceparent_probe", fresh_db,
         kafka_bootstrap, topic_prefix, str(out_file)],
        env=env, check=True, timeout=120, stdout=subprocess.DEVNULL,
    )
    out = json.loads(out_file.read_text())
    saga_trace = out["saga_traceparent"].split("-")[1]
    for kind in ("command", "reply"):
        parents = [value for name, value in out[kind] if name == "traceparent"]
        assert len(parents) == 1, (kind, out[kind])
        version, trace_id, _span, flags = parents[0].split("-")
        assert (version, trace_id) == ("00", saga_trace), (kind, parents)
        assert int(flags, 16) & 1, f"{kind}: the saga's trace is sampled, its context too"
    names = [name for name, _ in out["command"]]
    assert names.count("saga-message-id") == 1 and "sagaflow-relay-epoch" in names
