"""Keep the demo's spans while Jaeger is still being built, and hand them over once it is up.

Building Jaeger from its Go module takes minutes the first time; the demo should not wait for
it. ``python -m devstack.trace_buffer`` (started in the background by
``devstack up --jaeger-in-background``) listens on Jaeger's OTLP/HTTP port at once and writes
every export request it receives to a spool folder, then builds Jaeger, starts it with its
OTLP/HTTP receiver on the port behind (``SAGAFLOW_JAEGER_OTLP_HTTP_BEHIND_PORT``), replays
the spool in arrival order, and from then on forwards each request as it comes. No span is
lost in between: a request that arrives while the spool is being replayed joins the spool.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from devstack import procs
from devstack.config import HOST, Settings
from devstack.jaeger import Jaeger, build_binary

log = logging.getLogger(__name__)

#: Request headers an OTLP receiver needs to read the body again.
KEPT_HEADERS = ("Content-Type", "Content-Encoding")


class Spool:
    """Export requests kept in order as files until a receiver takes them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._target: str | None = None
        self._seq = max((int(p.stem) for p in folder.glob("*.req")), default=0)

    def take(self, path: str, headers: dict[str, str], body: bytes) -> None:
        """Forward the request when a receiver is set and the spool is empty, else keep it."""
        with self._lock:
            target = self._target
            if target is None:
                self._keep(path, headers, body)
                return
        if not _send(target, path, headers, body):
            with self._lock:  # keep it, and what follows behind it, until the next hand-over
                self._target = None
                self._keep(path, headers, body)

    @property
    def forwarding(self) -> bool:
        """True once handed over, until a forward fails."""
        return self._target is not None

    def hand_over(self, target: str) -> int:
        """Replay every kept request to ``target`` in order; then forward new ones directly."""
        sent = 0
        while True:
            with self._lock:
                pending = sorted(self.folder.glob("*.req"), key=lambda p: int(p.stem))
                if not pending:
                    self._target = target
                    return sent
            for file in pending:
                path, headers, body = _load(file)
                if not _send(target, path, headers, body):
                    raise OSError(f"the receiver at {target} refused {file.name}")
                file.unlink()
                sent += 1

    def _keep(self, path: str, headers: dict[str, str], body: bytes) -> None:
        self._seq += 1
        head = "\n".join([path, *(f"{k}: {v}" for k, v in headers.items())]).encode()
        staging = self.folder / f"{self._seq}.tmp"
        staging.write_bytes(len(head).to_bytes(4, "big") + head + body)
        staging.rename(staging.with_suffix(".req"))


def _load(file: Path) -> tuple[str, dict[str, str], bytes]:
    raw = file.read_bytes()
    size = int.from_bytes(raw[:4], "big")
    path, *lines = raw[4:4 + size].decode().split("\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return path, headers, raw[4 + size:]


def _send(target: str, path: str, headers: dict[str, str], body: bytes) -> bool:
    """POST to the receiver; True when it took the request (or refused it for good: 4xx)."""
    request = urllib.request.Request(target + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return bool(200 <= resp.status < 300)
    except urllib.error.HTTPError as exc:
        # A path the receiver does not serve (say, metrics: Jaeger takes traces only) would
        # have been refused by Jaeger itself too; anything else is kept for a retry.
        return 400 <= exc.code < 500
    except (urllib.error.URLError, OSError):
        return False


def serve(spool: Spool, port: int) -> ThreadingHTTPServer:
    """An OTLP/HTTP endpoint on ``port`` that answers every export with success."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            kept = {h: self.headers[h] for h in KEPT_HEADERS if self.headers.get(h)}
            spool.take(self.path, kept, body)
            json = "json" in (self.headers.get("Content-Type") or "")
            answer = b"{}" if json else b""
            self.send_response(200)
            self.send_header("Content-Type", "application/json" if json
                             else "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            log.debug(format, *args)

    server = ThreadingHTTPServer((HOST, port), Handler)
    threading.Thread(target=server.serve_forever, name="otlp-spool", daemon=True).start()
    return server


def wait_for_binary(jaeger: Jaeger) -> None:
    """Build Jaeger, or wait for the binary ``SAGAFLOW_JAEGER_BIN`` names to appear."""
    if os.environ.get("SAGAFLOW_JAEGER_BIN"):
        while not jaeger.binary().is_file():
            time.sleep(0.5)
        return
    build_binary(jaeger.binary())


def run(settings: Settings) -> None:
    jaeger = Jaeger(settings)
    spool = Spool(jaeger.spool_dir)
    server = serve(spool, settings.jaeger_otlp_http_port)
    log.info("keeping spans on %s while Jaeger is built", settings.jaeger_otlp_url)
    try:
        wait_for_binary(jaeger)
        jaeger.write_config(otlp_http=settings.jaeger_otlp_http_behind_port)
        jaeger.start()
        procs.wait_until(jaeger.healthy, timeout=jaeger.start_timeout, what="jaeger start",
                         alive=lambda: jaeger.pid() is not None, log_file=jaeger.log_file)
        sent = spool.hand_over(f"http://{HOST}:{settings.jaeger_otlp_http_behind_port}")
        log.info("Jaeger is up at %s; %d kept export request(s) handed over",
                 settings.jaeger_query_url, sent)
        while True:  # forward until devstack down stops us (SIGTERM)
            time.sleep(2)
            if not spool.forwarding:  # Jaeger refused one: hand the spool over again
                with contextlib.suppress(OSError):
                    spool.hand_over(f"http://{HOST}:{settings.jaeger_otlp_http_behind_port}")
    finally:
        server.shutdown()


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s trace-buffer: %(message)s")
    signal.signal(signal.SIGTERM, _stop)
    run(Settings.from_env())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
