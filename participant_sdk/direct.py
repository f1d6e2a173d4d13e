"""The direct lane: a coordinator hands a committed command straight to a participant over one
TCP connection and gets the reply back on it, with Kafka as the recovery path.

Why: over Kafka a command and its reply cost two produce/fetch hops through the broker and a
participant's consume and produce (most of its CPU). On the lane the same record (topic, key,
value, headers) goes in one frame and its reply comes back in another. Nothing else changes:
the command was committed to the coordinator's outbox first, the participant runs it through
the same :class:`~participant_sdk.commands.CommandProcessor` (barrier, dead letters, tracing),
and the coordinator deletes the outbox row only after it applied the reply. Whatever goes
wrong on the lane (no connection, a timeout, a participant that answers "redeliver", a
coordinator crash) leaves the row for Kafka, and the barrier answers a command that ran
already with the same reply again.

Frames: a 4-byte big-endian length, then a 4-byte request id, a 1-byte kind and the fields,
each a 4-byte length and its bytes (a field of length 0xFFFFFFFF is ``None``). A connection
opens with ``HELLO`` carrying the shared token (empty when none is set); a wrong token is
answered ``REFUSED`` and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Protocol

from participant_sdk.records import InboundRecord
from participant_sdk.startup_errors import SettingsError

__all__ = [
    "DIRECT_SYSTEM",
    "DirectAnswer",
    "DirectClient",
    "DirectServer",
    "FrameError",
    "Kind",
    "decode_frame",
    "encode_frame",
    "parse_address",
]

log = logging.getLogger(__name__)

#: ``messaging.system`` of the spans of a command handed over on the lane.
DIRECT_SYSTEM: Final = "sagaflow.direct"
#: Largest frame either side accepts (a command or reply is a few kilobytes).
MAX_FRAME: Final = 16 * 1024 * 1024
_LEN = struct.Struct(">I")
_HEAD = struct.Struct(">IB")
_NONE = 0xFFFFFFFF


class Kind(IntEnum):
    HELLO = 1
    COMMAND = 2
    #: The command ran (or was answered by the barrier): the reply follows.
    REPLY = 10
    #: The command became a dead letter on the participant: there is no reply.
    NO_REPLY = 11
    #: The participant could not finish it now (its database is away): send it over Kafka.
    REDELIVER = 12
    REFUSED = 13


class FrameError(ValueError):
    """A frame that does not parse; the connection it came on is closed."""


Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class Frame:
    request: int
    kind: Kind
    topic: str = ""
    key: bytes | None = None
    value: bytes | None = None
    headers: Headers = ()


def encode_frame(frame: Frame) -> bytes:
    parts = [_HEAD.pack(frame.request, frame.kind)]
    for field in (frame.topic.encode(), frame.key, frame.value):
        parts.append(_LEN.pack(_NONE) if field is None else _LEN.pack(len(field)) + field)
    parts.append(_LEN.pack(len(frame.headers)))
    for name, value in frame.headers:
        raw = name.encode()
        parts.append(_LEN.pack(len(raw)) + raw + _LEN.pack(len(value)) + bytes(value))
    body = b"".join(parts)
    return _LEN.pack(len(body)) + body


def decode_frame(body: bytes) -> Frame:
    """The frame in ``body`` (without its length prefix); :class:`FrameError` if malformed."""
    try:
        request, kind_code = _HEAD.unpack_from(body, 0)
        kind = Kind(kind_code)
        at = _HEAD.size
        fields: list[bytes | None] = []
        for _ in range(3):
            field, at = _field(body, at)
            fields.append(field)
        (count,), at = _LEN.unpack_from(body, at), at + _LEN.size
        headers = []
        for _ in range(count):
            name, at = _field(body, at)
            value, at = _field(body, at)
            if name is None or value is None:
                raise FrameError("a header without name or value")
            headers.append((name.decode(), value))
        if at != len(body):
            raise FrameError(f"{len(body) - at} bytes after the last field")
        topic = fields[0]
        if topic is None:
            raise FrameError("no topic")
        return Frame(request, kind, topic.decode(), fields[1], fields[2], headers)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, FrameError):
            raise
        raise FrameError(str(exc)) from exc


def _field(body: bytes, at: int) -> tuple[bytes | None, int]:
    (size,) = _LEN.unpack_from(body, at)
    at += _LEN.size
    if size == _NONE:
        return None, at
    if at + size > len(body):
        raise FrameError("a field runs past the frame")
    return body[at:at + size], at + size


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(_LEN.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError("the stream ended inside a length") from exc
    (size,) = _LEN.unpack(head)
    if size > MAX_FRAME:
        raise FrameError(f"a frame of {size} bytes (at most {MAX_FRAME})")
    try:
        return decode_frame(await reader.readexactly(size))
    except asyncio.IncompleteReadError as exc:
        raise FrameError("the stream ended inside a frame") from exc


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair; :class:`ValueError` with the reason."""
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (not sep or not host or "[" in host or "]" in host or not port.isascii()
            or not port.isdigit() or not 0 < int(port) < 65536):
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


# -- the participant's side ---------------------------------------------------------------

class ReplyRecord(Protocol):
    """What a participant answers (:class:`~participant_sdk.commands.OutgoingReply` fits)."""

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...
    @property
    def headers(self) -> Headers: ...


#: Runs one command record: its reply, or None when it became a dead letter; raises when it
#: cannot finish it now (answered REDELIVER).
Answer = Callable[[InboundRecord], Awaitable[ReplyRecord | None]]


class DirectServer:
    """Serves the direct lane for one participant: ``start()``, ``stop()``.

    ``answer`` runs a command (the runner orders a saga's commands the way its Kafka lanes do).
    """

    def __init__(self, answer: Answer, address: str, *, token: str = "",
                 name: str = "participant") -> None:
        self._answer = answer
        self._host, self._port = parse_address(address)
        self._token = token.encode()
        self._name = name
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._jobs: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        #: Commands answered on the lane, and connections refused for their token.
        self.answered = 0
        self.refused = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self._host, self._port)
        except OSError as exc:  # a setting to change, not a service to wait for
            raise SettingsError(
                f"cannot serve the direct lane on {self._host}:{self._port}: "
                f"{exc.strerror or exc} (set SAGAFLOW_PARTICIPANT_DIRECT_LISTEN)") from exc
        log.info("%s: direct lane on %s:%d", self._name, self._host, self.port)

    async def stop(self, grace: float = 0.5) -> None:
        """Stop accepting, give the commands being run ``grace`` seconds, then close every
        connection (the coordinator sends what was not answered over Kafka)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        if self._jobs:
            await asyncio.wait(list(self._jobs), timeout=grace)
        for job in list(self._jobs):
            job.cancel()
        for writer in list(self._writers):
            writer.close()  # its connection's read ends, and the connection with it
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=grace)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        running: set[asyncio.Task[None]] = set()
        try:
            hello = await read_frame(reader)
            if hello is None or hello.kind is not Kind.HELLO or not hmac.compare_digest(
                    hello.value or b"", self._token):
                self.refused += 1
                log.warning("%s: direct lane connection refused (no or wrong token)", self._name)
                writer.write(encode_frame(Frame(0, Kind.REFUSED)))
                return
            while self._server is not None:
                frame = await read_frame(reader)
                if frame is None:
                    break
                if frame.kind is not Kind.COMMAND:
                    raise FrameError(f"a {frame.kind.name} frame where a command belongs")
                job = asyncio.create_task(self._run(frame, writer))
                running.add(job)
                self._jobs.add(job)
                job.add_done_callback(running.discard)
                job.add_done_callback(self._jobs.discard)
            if running:
                await asyncio.wait(running)
        except (FrameError, ConnectionError) as exc:
            if self._server is not None:
                log.warning("%s: direct lane connection dropped: %s", self._name, exc)
        finally:
            for job in running:
                job.cancel()
            writer.close()
            self._writers.discard(writer)
            self._connections.discard(task)

    async def _run(self, frame: Frame, writer: asyncio.StreamWriter) -> None:
        record = InboundRecord(frame.topic, -1, -1, frame.key, frame.value, frame.headers)
        try:
            reply = await self._answer(record)
        except Exception as exc:  # its database is away: the coordinator uses Kafka
            log.warning("%s: direct command not finished (%r); it goes over Kafka", self._name,
                        exc)
            out = Frame(frame.request, Kind.REDELIVER)
        else:
            out = Frame(frame.request, Kind.NO_REPLY) if reply is None else Frame(
                frame.request, Kind.REPLY, reply.topic, reply.key, reply.value, reply.headers)
        self.answered += 1
        if not writer.is_closing():
            writer.write(encode_frame(out))


# -- the coordinator's side ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DirectAnswer:
    """A participant's answer: ``kind`` REPLY with the reply record, NO_REPLY, REDELIVER."""

    kind: Kind
    reply: InboundRecord | None = None


class DirectClient:
    """One multiplexed connection to a participant's lane, opened on first use.

    :meth:`call` returns the answer, or None when the lane cannot answer now (no connection,
    the timeout passed, the connection broke): send the record over Kafka then. After a failed
    connect the lane is not tried again for ``retry_after`` seconds.
    """

    def __init__(self, address: str, *, token: str = "", timeout: float = 10.0,
                 retry_after: float = 1.0) -> None:
        self.address = address
        self._host, self._port = parse_address(address)
        self._token = token.encode()
        self._timeout = timeout
        self._retry_after = retry_after
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[Frame]] = {}
        self._next = 0
        self._down_until = 0.0
        self._connecting = asyncio.Lock()
        #: Calls answered, and calls left to Kafka.
        self.answered = 0
        self.missed = 0

    async def call(self, topic: str, key: bytes | None, value: bytes | None,
                   headers: Headers) -> DirectAnswer | None:
        writer = await self._connection()
        if writer is None:
            self.missed += 1
            return None
        self._next = (self._next + 1) & 0xFFFFFFFF
        request = self._next
        future: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._waiting[request] = future
        if self._writer is not writer:  # it broke meanwhile: nobody would answer
            del self._waiting[request]
            self.missed += 1
            return None
        try:
            writer.write(encode_frame(Frame(request, Kind.COMMAND, topic, key, value, headers)))
            frame = await asyncio.wait_for(future, self._timeout)
        except (TimeoutError, ConnectionError, OSError) as exc:
            self.missed += 1
            log.warning("direct lane to %s: no answer (%r); the command goes over Kafka",
                        self.address, exc)
            return None
        finally:
            self._waiting.pop(request, None)
        self.answered += 1
        if frame.kind is Kind.REPLY:
            return DirectAnswer(Kind.REPLY, InboundRecord(
                frame.topic, -1, -1, frame.key, frame.value, frame.headers))
        return DirectAnswer(frame.kind)

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _connection(self) -> asyncio.StreamWriter | None:
        if self._writer is not None and not self._writer.is_closing():
            return self._writer
        if time.monotonic() < self._down_until:
            return None
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self._host, self._port), self._timeout)
            except (OSError, TimeoutError) as exc:
                self._down_until = time.monotonic() + self._retry_after
                log.warning("direct lane to %s: cannot connect (%r); commands go over Kafka "
                            "for %.1f s", self.address, exc, self._retry_after)
                return None
            writer.write(encode_frame(Frame(0, Kind.HELLO, value=self._token)))
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader, writer),
                                                    name=f"direct-{self.address}")
            return writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error: BaseException = ConnectionResetError("the direct lane closed")
        try:
            while True:
                frame = await read_frame(reader)
                if frame is None:
                    break
                if frame.kind is Kind.REFUSED:
                    error = ConnectionRefusedError("the participant refused the lane's token")
                    self._down_until = time.monotonic() + self._retry_after
                    log.error("direct lane to %s: refused (wrong token?)", self.address)
                    break
                future = self._waiting.get(frame.request)
                if future is not None and not future.done():
                    future.set_result(frame)
        except (FrameError, OSError) as exc:
            error = ConnectionResetError(f"the direct lane broke: {exc}")
            log.warning("direct lane to %s: %s", self.address, exc)
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(error)
