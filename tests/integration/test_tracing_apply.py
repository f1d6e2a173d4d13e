"""The coordinator continues the saga's trace: start span -> stored context -> commands; a
reply's traceparent -> apply span -> the commands the reply causes (store + reply path)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_apply_span_continues_the_reply_and_parents_the_next_commands(
    fresh_db: str, topic_prefix: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration._tracing_probe", fresh_db, topic_prefix],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    spans = {s["name"]: s for s in out["spans"] if not s["name"].startswith(("SELECT", "INSERT",
                                                                             "UPDATE", "BEGIN",
                                                                             "COMMIT", "DELETE"))}
    start = spans["saga start tcc_order"]
    assert start["parent"] == out["client_span"]
    assert start["attributes"]["saga.type"] == "tcc_order"
    assert start["attributes"]["saga.version"] == 1
    # The stored context and the first command continue the start span.
    assert out["stored"]["traceparent"].split("-")[2] == start["span_id"]
    assert out["first_headers"]["traceparent"].split("-")[2] == start["span_id"]
    apply = spans[f"process {topic_prefix}.replies"]
    assert apply["kind"] == "CONSUMER"
    assert apply["parent"] == out["participant_span"]  # the first traceparent header won
    assert apply["trace_id"] == start["trace_id"]
    attrs = apply["attributes"]
    assert attrs["messaging.system"] == "kafka"
    assert attrs["messaging.destination.name"] == f"{topic_prefix}.replies"
    assert attrs["messaging.kafka.offset"] == 7
    assert attrs["saga.type"] == "tcc_order" and attrs["saga.version"] == 1
    assert attrs["saga.step"] == "reserve" and attrs["saga.phase"] == "try"
    assert attrs["saga.attempt"] == 1 and attrs["saga.apply.outcome"] == "applied"
    # The command the reply caused (the next step's try) carries the apply span.
    assert out["next_headers"]["traceparent"].split("-")[2] == apply["span_id"]
    # asyncpg spans are not instrumented here; nothing started an unparented trace.
    assert {s["trace_id"] for s in out["spans"]} == {start["trace_id"]}
