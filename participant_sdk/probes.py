"""One HTTP port per process for Kubernetes and Prometheus: ``/healthz``, ``/readyz``, ``/metrics``.

Served from the process's own event loop, not from a thread (prometheus_client's server runs in
one): a loop wedged by blocking code, or a process whose essential task died, stops passing
``/healthz``, which is what a liveness probe must notice. ``/readyz`` also checks the database
answers, so that a Postgres failover takes the process out of rotation rather than restarting it.

``/healthz``: 200 ``{"status": "ok"}``, or 503 with the reason (restart me).
``/readyz``: 200 ``{"status": "ready"}``, or 503 with the reason (send me no work).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable

import asyncpg
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["ProbeServer", "database_answers", "tasks_alive"]

log = logging.getLogger(__name__)

#: A liveness check: None when fine, else why not.
LiveCheck = Callable[[], str | None]
#: A readiness check: None when ready, else why not (it may do I/O, bounded by the server).
ReadyCheck = Callable[[], Awaitable[str | None]]

_READY_TIMEOUT = 2.0
_REQUEST_TIMEOUT = 5.0
_MAX_REQUEST = 8192


def tasks_alive(tasks: Iterable[asyncio.Task[object] | None]) -> str | None:
    """None while every task runs; else which one ended (a crashed loop fails liveness)."""
    for task in tasks:
        if task is not None and task.done():
            return f"task {task.get_name()} ended"
    return None


async def database_answers(pool: asyncpg.Pool | None) -> str | None:
    """None when ``SELECT 1`` comes back on ``pool`` (bounded by the server's timeout)."""
    if pool is None:
        return "not connected to Postgres"
    try:
        await pool.fetchval("SELECT 1")
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"Postgres: {type(exc).__name__}"
    return None


class ProbeServer:
    """A minimal HTTP/1.1 server (GET and HEAD, one request per connection)."""

    def __init__(self, *, registry: CollectorRegistry, live: LiveCheck, ready: ReadyCheck,
                 name: str) -> None:
        self.registry = registry
        self.live = live
        self.ready = ready
        self.name = name
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._server is None:
            raise RuntimeError("probe server not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self, port: int, host: str = "127.0.0.1") -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        log.info("%s: /healthz /readyz /metrics on http://%s:%d", self.name, host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            status, ctype, body = await self._answer(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            writer.close()
            return
        method = head.split(b" ", 1)[0]
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + (b"" if method == b"HEAD" else body))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    async def _answer(self, head: bytes) -> tuple[str, str, bytes]:
        parts = head[:_MAX_REQUEST].split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET or HEAD\n"
        if target == b"/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if target == b"/healthz":
            reason = self.live()
            return _status(reason, "ok", "failed")
        if target == b"/readyz":
            try:
                async with asyncio.timeout(_READY_TIMEOUT):
                    reason = await self.ready()
            except TimeoutError:
                reason = f"no answer within {_READY_TIMEOUT:g}s"
            return _status(reason, "ready", "unavailable")
        return "404 Not Found", "text/plain", b"/healthz, /readyz or /metrics\n"


def _status(reason: str | None, good: str, bad: str) -> tuple[str, str, bytes]:
    if reason is None:
        return "200 OK", "application/json", json.dumps({"status": good}).encode()
    return ("503 Service Unavailable", "application/json",
            json.dumps({"status": bad, "reason": reason}).encode())
