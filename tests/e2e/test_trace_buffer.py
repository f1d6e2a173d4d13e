"""``make demo`` does not wait for Jaeger's first build, and loses no span to it.

``devstack up jaeger --jaeger-in-background`` returns while Jaeger is "being built" (here: its
binary appears only when the test copies the real one into place), a span exported meanwhile
is kept, and once Jaeger is up that span is in Jaeger, as is one sent afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from devstack.config import Settings
from devstack.jaeger import Jaeger

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PORTS = ("SAGAFLOW_JAEGER_OTLP_GRPC_PORT", "SAGAFLOW_JAEGER_OTLP_HTTP_PORT",
         "SAGAFLOW_JAEGER_QUERY_PORT", "SAGAFLOW_JAEGER_QUERY_GRPC_PORT",
         "SAGAFLOW_JAEGER_OTLP_HTTP_BEHIND_PORT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _built_jaeger() -> Path:
    """The Jaeger binary devstack built (``make test`` builds it before the tests run)."""
    binary = Jaeger(Settings.from_env()).binary()
    if not binary.is_file():
        pytest.fail(f"no Jaeger binary at {binary}: run `.venv/bin/python -m devstack up "
                    "jaeger` first, or set SAGAFLOW_JAEGER_BIN")
    return binary


def _devstack(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devstack", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _trace(query_url: str, trace_id: str) -> list[str]:
    """The span names Jaeger holds for ``trace_id`` (empty while it has none or is down)."""
    try:
        with urllib.request.urlopen(f"{query_url}/api/traces/{trace_id}", timeout=5) as resp:
            data = json.load(resp)["data"]
    except (urllib.error.URLError, OSError, KeyError, ValueError):
        return []
    return [span["operationName"] for t in data for span in t["spans"]]


@pytest.fixture
def background_jaeger(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path, Settings]]:
    """(env, where the binary will appear, settings) of a Jaeger whose build is under way."""
    _built_jaeger()  # fail before starting anything when there is none
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLOW_JAEGER")}
    env.update({name: str(_free_port()) for name in PORTS})
    target = tmp_path / "bin" / "jaeger"
    env.update({"SAGAFLOW_DEVSTACK_HOME": str(tmp_path / "home"),
                "SAGAFLOW_CACHE_DIR": str(tmp_path / "cache"),
                "SAGAFLOW_JAEGER_BIN": str(target), "PYTHONPATH": str(ROOT)})
    settings = Settings.from_env(env)
    started = _devstack(env, "up", "jaeger", "--jaeger-in-background")
    try:
        assert started.returncode == 0, started.stderr
        assert " building " in started.stdout, started.stdout
        yield env, target, settings
    finally:
        stopped = _devstack(env, "down", "jaeger")
        assert stopped.returncode == 0, stopped.stderr


def test_a_span_sent_while_jaeger_builds_reaches_it(
        background_jaeger: tuple[dict[str, str], Path, Settings]) -> None:
    env, target, settings = background_jaeger
    provider = TracerProvider(resource=Resource.create(
        {"service.name": f"buffer-test-{uuid.uuid4().hex[:8]}"}))
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{settings.jaeger_otlp_url}/v1/traces")))
    tracer = provider.get_tracer("test")
    try:
        with tracer.start_as_current_span("before jaeger") as early:
            pass
        early_id = format(early.get_span_context().trace_id, "032x")
        # Jaeger is not there yet: the span was kept, not delivered.
        assert _trace(settings.jaeger_query_url, early_id) == []
        spool = Jaeger(settings).spool_dir
        assert list(spool.glob("*.req")), "the early span was not kept"

        # The build finishes: the binary appears (atomically, as go build's rename does).
        target.parent.mkdir(parents=True)
        staging = target.with_suffix(".tmp")
        shutil.copy2(_built_jaeger(), staging)
        staging.rename(target)

        deadline = time.monotonic() + 120
        while not _trace(settings.jaeger_query_url, early_id):
            assert time.monotonic() < deadline, "the kept span never reached Jaeger"
            time.sleep(1)
        assert _trace(settings.jaeger_query_url, early_id) == ["before jaeger"]
        assert not list(spool.glob("*.req"))
        status = _devstack(env, "status", "jaeger")
        assert " running " in status.stdout, status.stdout

        with tracer.start_as_current_span("after jaeger") as late:  # forwarded at once
            pass
        late_id = format(late.get_span_context().trace_id, "032x")
        deadline = time.monotonic() + 60
        while not _trace(settings.jaeger_query_url, late_id):
            assert time.monotonic() < deadline, "a span sent after the hand-over was lost"
            time.sleep(1)
    finally:
        provider.shutdown()
