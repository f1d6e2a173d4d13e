"""The Jaeger v2 all-in-one (in-memory storage), built from its Go module with ``go build``.

``up()`` builds it (minutes the first time) and waits; ``up_in_background()`` returns at once
and leaves the build to :mod:`devstack.trace_buffer`, which keeps the spans sent meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

from devstack import procs
from devstack.config import HOST, REPO_ROOT, RESOURCES
from devstack.errors import ServiceError
from devstack.service import Service, State, Status

JAEGER_PACKAGE = "github.com/jaegertracing/jaeger/cmd/jaeger"
TOOL_MODULE = RESOURCES / "jaeger"  # go.mod/go.sum pinning the Jaeger version

log = logging.getLogger(__name__)

CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: {host}:{query}
    grpc:
      endpoint: {host}:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {host}:{otlp_grpc}
      http:
        endpoint: {host}:{otlp_http}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


class Jaeger(Service):
    name = "jaeger"
    start_timeout = 60.0

    @property
    def address(self) -> str:
        return f"otlp-http={self.settings.jaeger_otlp_url} query={self.settings.jaeger_query_url}"

    @property
    def log_file(self) -> Path:
        return self.dir / "jaeger.log"

    @property
    def config(self) -> Path:
        return self.dir / "config.yaml"

    def ports(self) -> list[int]:
        s = self.settings
        return [
            s.jaeger_otlp_grpc_port,
            s.jaeger_otlp_http_port,
            s.jaeger_query_port,
            s.jaeger_query_grpc_port,
        ]

    @property
    def spool_dir(self) -> Path:
        """Export requests kept while Jaeger is built (devstack.trace_buffer)."""
        return self.dir / "spool"

    @property
    def buffer_log(self) -> Path:
        return self.dir / "trace-buffer.log"

    def pid(self) -> int | None:
        return procs.pid_running(self.dir / "jaeger.pid", str(self.config))

    def buffer_pid(self) -> int | None:
        """The background builder and span keeper, while it runs."""
        return procs.pid_running(self.dir / "trace-buffer.pid", "devstack.trace_buffer")

    def status(self) -> Status:
        buffer = self.buffer_pid()
        if buffer is not None and self.pid() is None:
            return Status(name=self.name, state=State.BUILDING, address=self.address,
                          pid=buffer, log_file=self.buffer_log)
        return super().status()

    def up_in_background(self) -> Status:
        """Start Jaeger if it is built; else build it behind a span-keeping port, not waiting."""
        if self.buffer_pid() is not None:
            return self.status()
        if self.binary().is_file():
            return self.up()
        with procs.file_lock(self.settings.home / f".{self.name}.lock"):
            if any(procs.port_open(p) for p in self.ports()):
                return self.status()
            self.dir.mkdir(parents=True, exist_ok=True)
            log.info("building Jaeger in the background (log: %s); spans sent meanwhile are "
                     "kept and handed over once it is up", self.buffer_log)
            procs.spawn_detached(
                [sys.executable, "-m", "devstack.trace_buffer"],
                pid_file=self.dir / "trace-buffer.pid", log_file=self.buffer_log,
                cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
            procs.wait_until(lambda: procs.port_open(self.settings.jaeger_otlp_http_port),
                             timeout=30, what="the span keeper's port",
                             alive=lambda: self.buffer_pid() is not None,
                             log_file=self.buffer_log)
            return self.status()

    def up(self) -> Status:
        """Start Jaeger and wait; a background build under way is waited for, not repeated."""
        if self.buffer_pid() is not None:
            procs.wait_until(self.healthy, timeout=1800, what="jaeger's background build",
                             alive=lambda: self.buffer_pid() is not None,
                             log_file=self.buffer_log)
            return self.status()
        return super().up()

    def down(self) -> Status:
        status = super().down()
        if (buffer := self.buffer_pid()) is not None:
            log.info("stopping the span keeper (pid %d)", buffer)
            procs.terminate(buffer, timeout=20)
        return self.status() if buffer is not None else status

    def healthy(self) -> bool:
        if not procs.port_open(self.settings.jaeger_otlp_http_port):
            return False
        url = f"{self.settings.jaeger_query_url}/api/services"
        try:
            with urllib.request.urlopen(url, timeout=3) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def binary(self) -> Path:
        if env := os.environ.get("SAGAFLOW_JAEGER_BIN"):
            return Path(env)
        digest = hashlib.sha256(
            (TOOL_MODULE / "go.mod").read_bytes() + (TOOL_MODULE / "go.sum").read_bytes()
        ).hexdigest()[:12]
        return self.settings.cache / f"jaeger-{digest}" / "jaeger"

    def install(self) -> None:
        build_binary(self.binary())
        self.write_config(otlp_http=self.settings.jaeger_otlp_http_port)

    def write_config(self, *, otlp_http: int) -> None:
        """Jaeger's config, its OTLP/HTTP receiver on ``otlp_http``."""
        s = self.settings
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            CONFIG.format(
                host=HOST,
                query=s.jaeger_query_port,
                query_grpc=s.jaeger_query_grpc_port,
                otlp_grpc=s.jaeger_otlp_grpc_port,
                otlp_http=otlp_http,
            )
        )

    def start(self) -> None:
        procs.spawn_detached(
            [str(self.binary()), "--config", str(self.config)],
            pid_file=self.dir / "jaeger.pid",
            log_file=self.log_file,
            cwd=self.dir,
        )

    def stop(self, pid: int) -> None:
        procs.terminate(pid, timeout=20)


def required_go() -> str:
    """The Go version the pinned tool module's ``go`` directive asks for (e.g. ``1.26.8``)."""
    for line in (TOOL_MODULE / "go.mod").read_text(encoding="utf-8").splitlines():
        if line.startswith("go "):
            return line.split()[1]
    raise ServiceError(f"no `go` directive in {TOOL_MODULE / 'go.mod'}")


def build_binary(target: Path) -> None:
    """``go build`` Jaeger from the pinned tool module into ``target`` unless it is there."""
    if target.is_file():
        return
    go = shutil.which("go")
    if go is None:
        raise ServiceError(
            f"Jaeger is built from source: install Go {required_go()}+ (`go` on PATH)")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".tmp")
    log.info("building Jaeger into %s (a few minutes the first time)", target)
    # Niced: under `make demo` the build runs beside the stack starting up, and on a small
    # machine it would otherwise take the cores the demo's first sagas need.
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    procs.run(
        [*nice, go, "build", "-C", str(TOOL_MODULE), "-o", str(staging), JAEGER_PACKAGE],
        timeout=1800,
    )
    staging.rename(target)
