"""A small asyncio TCP proxy that can drop every connection on demand.

Put it between the processes under test and Postgres or Kafka: :meth:`TcpProxy.cut` resets
every open connection (both sides see a RST mid-operation), and :meth:`TcpProxy.refuse` also
turns new connections away for a while, like a short network partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import TracebackType
from typing import Self

_CHUNK = 65536


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target_host:target_port``; run it on the test's loop.

    Never block the loop that runs it (wrap blocking calls in ``asyncio.to_thread``), or the
    traffic through it stalls.
    """

    def __init__(self, target_host: str, target_port: int, *, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._listen_port = listen_port
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._refuse_until = 0.0
        #: Connections reset by :meth:`cut`, over the proxy's life.
        self.cuts = 0
        self.accepted = 0

    @property
    def port(self) -> int:
        assert self._server is not None, "proxy not started"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def open_connections(self) -> int:
        return len(self._pairs)

    async def start(self) -> Self:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self._listen_port, reuse_address=True
        )
        return self

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        self._server = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def cut(self) -> int:
        """Reset every open connection; return how many were cut."""
        pairs = list(self._pairs)
        self._pairs.clear()
        for client, upstream in pairs:
            for writer in (client, upstream):
                with contextlib.suppress(Exception):
                    writer.transport.abort()
        self.cuts += len(pairs)
        return len(pairs)

    def refuse(self, seconds: float) -> int:
        """Cut every connection and reset new ones for ``seconds``; return how many were cut."""
        self._refuse_until = time.monotonic() + seconds
        return self.cut()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self._refuse_until:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        pair = (writer, up_writer)
        self._pairs.add(pair)
        tasks = [
            asyncio.create_task(self._pipe(reader, up_writer, pair)),
            asyncio.create_task(self._pipe(up_reader, writer, pair)),
        ]
        self._tasks.update(tasks)
        for task in tasks:
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while data := await reader.read(_CHUNK):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One side ended: end both (neither Postgres nor Kafka relies on half-close).
            self._pairs.discard(pair)
            for w in pair:
                with contextlib.suppress(Exception):
                    w.transport.abort()
