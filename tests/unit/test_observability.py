"""Unit tests of the observability pieces that need no services."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from coordinator.observability.settings import (
    ObservabilitySettings,
    StuckPolicy,
    parse_duration,
    parse_thresholds,
)
from participant_sdk import telemetry
from participant_sdk.logging_config import SagaContextFilter, configure_logging, saga_context
from participant_sdk.protocol import ErrorInfo, ErrorKind, Outcome, Phase, ReplyEnvelope
from participant_sdk.tracing import carrier, record_reply


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """configure_logging() replaces the root handlers and level: put them back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize(("text", "seconds"), [
    ("60s", 60), ("5m", 300), ("1h", 3600), ("250ms", 0.25), ("90", 90), (" 2d ", 172800),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_bad_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="type"):
        parse_thresholds("order:60s")


def test_thresholds_step_over_type_over_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGAFLOW_STUCK_THRESHOLDS", "order=300s, order.reserve_funds=60s")
    monkeypatch.setenv("SAGAFLOW_STUCK_AFTER", "10m")
    monkeypatch.setenv("SAGAFLOW_STUCK_RETRIES", "4")
    policy = ObservabilitySettings().stuck_policy()
    assert policy.threshold("order", "reserve_funds") == timedelta(seconds=60)
    assert policy.threshold("order", "create_shipment") == timedelta(seconds=300)
    assert policy.threshold("refund", None) == timedelta(minutes=10)
    assert policy.shortest() == timedelta(seconds=60)
    assert policy.shortest("refund") == timedelta(minutes=10)
    assert policy.max_retries == 4
    assert ObservabilitySettings().metrics_port is None  # off by default


def test_stuck_policy_defaults() -> None:
    assert StuckPolicy().default == timedelta(minutes=5) and StuckPolicy().max_retries == 3


def test_log_records_carry_saga_and_trace_ids(root_logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging("svc", fmt="json", level="INFO", stream=stream)
    provider = TracerProvider()
    saga_id = uuid.uuid4()
    with provider.get_tracer("t").start_as_current_span("s") as span, saga_context(saga_id):
        logging.getLogger("x").info("hello %s", "there", extra={"step": "pay"})
    logging.getLogger("x").warning("outside")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["message"] == "hello there" and inside["service"] == "svc"
    assert inside["saga_id"] == str(saga_id) and inside["step"] == "pay"
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert "saga_id" not in outside and "trace_id" not in outside


def test_plain_format_appends_ids_only_when_known(root_logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging(fmt="plain", level="INFO", stream=stream)
    with saga_context("abc"):
        logging.getLogger("x").info("in")
    logging.getLogger("x").info("out")
    first, second = stream.getvalue().splitlines()
    assert first.endswith("x: in [saga=abc]") and second.endswith("x: out")


def test_filter_keeps_ids_given_explicitly() -> None:
    record = logging.makeLogRecord({"msg": "m", "saga_id": "given"})
    assert SagaContextFilter().filter(record) and record.saga_id == "given"  # type: ignore[attr-defined]


def test_sampler_drops_unparented_client_spans_only() -> None:
    sampler = telemetry.sagaflow_sampler()
    for kind in (SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER):
        assert sampler.should_sample(None, 1, "poll", kind).decision is Decision.DROP
    for kind in (SpanKind.SERVER, SpanKind.INTERNAL):
        assert sampler.should_sample(None, 1, "start", kind).decision is (
            Decision.RECORD_AND_SAMPLE)


def test_first_traceparent_wins() -> None:
    headers = [("traceparent", b"00-aa-01"), ("x", None), ("traceparent", b"00-bb-00")]
    assert carrier(headers) == {"traceparent": "00-aa-01"}


@pytest.mark.parametrize("outcome", [Outcome.REJECTED, Outcome.FAILED])
def test_failed_and_rejected_replies_mark_the_span_as_error(outcome: Outcome) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reply = ReplyEnvelope(
        message_id=uuid.uuid4(), in_reply_to=uuid.uuid4(), saga_id=uuid.uuid4(), step="ship",
        phase=Phase.ACTION, attempt=1, participant="shipping", outcome=outcome,
        error=ErrorInfo(kind=ErrorKind.BUSINESS, message="undeliverable",
                        type="BusinessRejection"),
    )
    with provider.get_tracer("t").start_as_current_span("process") as span:
        record_reply(span, reply)
    (finished,) = exporter.get_finished_spans()
    assert finished.status.status_code is StatusCode.ERROR
    assert finished.attributes is not None
    assert finished.attributes["saga.outcome"] == outcome.value
    assert finished.attributes["error.type"] == "BusinessRejection"
    (event,) = finished.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.message"] == "undeliverable"


def test_nothing_configured_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert telemetry.configure("svc") is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert telemetry.configure("svc") is None
    assert not telemetry.enabled()


_PROBE = """
import json, os
from opentelemetry import trace
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
from participant_sdk import telemetry
first = telemetry.configure("svc-default")
assert telemetry.configure("again") is first
print(json.dumps({
    "enabled": telemetry.enabled(),
    "service": first.resource.attributes["service.name"],
    "sampler": first.sampler.get_description(),
    "asyncpg": AsyncPGInstrumentor().is_instrumented_by_opentelemetry,
}))
"""


def test_configure_from_the_environment() -> None:
    env = {"PATH": "", "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "from-env"}
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"enabled": True, "service": "from-env", "asyncpg": True,
                   "sampler": "ParentBased{root:UnparentedClientSpanSampler,"
                              "remoteParentSampled:AlwaysOnSampler,"
                              "remoteParentNotSampled:AlwaysOffSampler,"
                              "localParentSampled:AlwaysOnSampler,"
                              "localParentNotSampled:AlwaysOffSampler}"}


async def test_metrics_route_renders_the_prometheus_text() -> None:
    import httpx
    from fastapi import FastAPI

    from coordinator.observability.api import mount_observability

    app = FastAPI()
    metrics = mount_observability(app, store_of=None)
    metrics.sagas_started.labels("order").inc()
    metrics.step_duration.labels("order", "pay", "try", "ok").observe(0.3)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        resp = await client.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    samples = {(s.name, s.labels.get("le")): s.value
               for family in text_string_to_metric_families(resp.text) for s in family.samples}
    assert samples[("sagaflow_sagas_started_total", None)] == 1
    assert samples[("sagaflow_step_duration_seconds_count", None)] == 1
    assert samples[("sagaflow_step_duration_seconds_sum", None)] == pytest.approx(0.3)
    assert samples[("sagaflow_step_duration_seconds_bucket", "0.25")] == 0
    assert samples[("sagaflow_step_duration_seconds_bucket", "0.5")] == 1


def test_node_name_strips_for_each_items_so_labels_do_not_multiply() -> None:
    from coordinator.observability.stuck import node_name

    assert node_name("reserve") == "reserve"
    assert node_name("lines[3].reserve") == "reserve"
    assert node_name("a[1].b[20].c") == "c"


def test_saga_view_names_every_active_step_when_there_are_several() -> None:
    from coordinator.cli.ops.render import render_saga

    base = {"saga_id": "s", "saga_type": "t", "version": 1, "status": "running",
            "state": "b.trying", "input": {}, "steps": []}
    assert "active" not in render_saga({**base, "active_steps": ["b"]})
    text = render_saga({**base, "active_steps": ["b", "lines[0].c"]})
    assert "active   b, lines[0].c (repair verbs need --step)" in text


def test_saga_view_names_a_childs_parent_and_a_parents_children() -> None:
    from coordinator.cli.ops.render import render_saga

    base = {"saga_id": "s", "saga_type": "t", "version": 1, "status": "running",
            "state": "running", "input": {}, "steps": []}
    assert "parent" not in render_saga(base) and "child" not in render_saga(base)
    assert "parent   p1 (node fulfil)" in render_saga(
        {**base, "parent_id": "p1", "parent_node": "fulfil"})
    text = render_saga({**base, "children": [{"saga_id": "c1", "saga_type": "ship",
                                              "status": "completed", "node": "east"}]})
    assert "child    c1 ship completed (node east)" in text


def test_saga_view_keeps_the_whole_why_and_reads_attempts_by_phase() -> None:
    from coordinator.cli.ops.render import render_dead, render_saga

    why = "payments refused: the card was declined by the issuer after three 3-D Secure prompts"
    base = {"saga_id": "s", "saga_type": "t", "version": 1, "status": "dead", "state": "dead",
            "input": {}, "steps": [{"key": "pay", "phase": "failed",
                                    "attempts": {"try": 3, "cancel": 1},
                                    "last_error": {"message": why}, "result": None}]}
    text = render_saga(base)
    assert why in text
    assert "try 3, cancel 1" in text and '{"try"' not in text
    dead = render_dead({"items": [{"saga_id": "s", "saga_type": "t", "step": "pay",
                                   "attempts": 3, "reason": why, "last_error": None}]})
    assert why in dead


def test_saga_cli_takes_its_global_flags_after_the_command_too() -> None:
    import io

    import httpx

    from coordinator.cli.ops.main import main

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[{"name": "order", "version": 1, "latest": True}])

    out = io.StringIO()
    code = main(["types", "--json", "--url", "http://api.example:9000", "--token", "t0k3n-abc"],
                out=out, transport=httpx.MockTransport(answer))
    assert code == 0
    assert str(seen[0].url) == "http://api.example:9000/saga-types"
    assert seen[0].headers["authorization"] == "Bearer t0k3n-abc"
    assert out.getvalue().startswith("[\n")  # --json after the command was honoured


def test_a_fresh_brokers_expected_coordinator_errors_log_as_info(
        root_logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging("svc", fmt="json", level="INFO", stream=stream)
    group = logging.getLogger("aiokafka.consumer.group_coordinator")
    level = group.level
    group.setLevel(logging.INFO)  # other tests (devstack's CLI) quiet the aiokafka loggers
    try:
        group.error("Group Coordinator Request failed: [Error 15] "
                    "GroupCoordinatorNotAvailableError")
        group.error("Topic p.payments.commands not found in cluster metadata")
        group.error("Failed fetch offsets from 1: [Error 6] NotLeaderForPartitionError: "
                    "TopicPartition(topic='p.replies', partition=3)")
        group.error("Error sending OffsetCommitRequest to node 1 [KafkaConnectionError: closed]")
    finally:
        group.setLevel(level)
    *expected, real = (json.loads(line) for line in stream.getvalue().splitlines())
    assert [e["level"] for e in expected] == ["INFO"] * 3
    assert real["level"] == "ERROR"
