"""The direct lane's wire (participant_sdk.direct) without Kafka or Postgres: the frame codec,
addresses and the settings that carry them, and a DirectServer and DirectClient talking over
real localhost sockets in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from coordinator.config.settings import CoordinatorSettings
from participant_sdk import ParticipantSettings
from participant_sdk.commands import OutgoingReply
from participant_sdk.direct import (
    MAX_FRAME,
    DirectClient,
    DirectServer,
    Frame,
    FrameError,
    Kind,
    decode_frame,
    encode_frame,
    parse_address,
    read_frame,
)
from participant_sdk.records import InboundRecord
from participant_sdk.startup_errors import SettingsError
from tests.chaos.support.services import free_port

_U32 = struct.Struct(">I")


def _roundtrip(frame: Frame) -> Frame:
    raw = encode_frame(frame)
    (size,) = _U32.unpack_from(raw, 0)
    assert size == len(raw) - 4
    return decode_frame(raw[4:])


def _same(a: Frame, b: Frame) -> None:
    assert (a.request, a.kind, a.topic, a.key, a.value, list(a.headers)) == (
        b.request, b.kind, b.topic, b.key, b.value, list(b.headers))


# -- the codec ------------------------------------------------------------------------------

@pytest.mark.parametrize("frame", [
    Frame(0, Kind.HELLO),
    Frame(1, Kind.COMMAND, "p.payments.commands", None, None, ()),
    Frame(2, Kind.COMMAND, "p.payments.commands", b"", b"", [("", b"")]),
    Frame(0xFFFFFFFF, Kind.REPLY, "répliques.✓", b"\x00\xff" * 10, bytes(range(256)),
          [("saga-message-id", b"\x00\x01\xfe\xff"), ("ünï", b""), ("dup", b"1"), ("dup", b"2")]),
    Frame(7, Kind.NO_REPLY),
    Frame(8, Kind.REDELIVER, key=b"k"),
])
def test_frames_round_trip(frame: Frame) -> None:
    _same(_roundtrip(frame), frame)


def test_none_and_empty_are_told_apart() -> None:
    none = _roundtrip(Frame(3, Kind.COMMAND, "t", None, None))
    empty = _roundtrip(Frame(3, Kind.COMMAND, "t", b"", b""))
    assert (none.key, none.value) == (None, None)
    assert (empty.key, empty.value) == (b"", b"")


_headers = st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=40)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(request=st.integers(0, 0xFFFFFFFF), kind=st.sampled_from(list(Kind)),
       topic=st.text(max_size=60), key=st.none() | st.binary(max_size=80),
       value=st.none() | st.binary(max_size=300), headers=_headers)
def test_any_frame_round_trips(request: int, kind: Kind, topic: str, key: bytes | None,
                               value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
    frame = Frame(request, kind, topic, key, value, headers)
    _same(_roundtrip(frame), frame)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_frame_error_only(body: bytes) -> None:
    with contextlib.suppress(FrameError):
        decode_frame(body)


def _body(frame: Frame) -> bytes:
    return encode_frame(frame)[4:]


_GOOD = _body(Frame(5, Kind.COMMAND, "topic", b"key", b"value", [("h", b"v")]))


def _field(data: bytes | None) -> bytes:
    return _U32.pack(0xFFFFFFFF) if data is None else _U32.pack(len(data)) + data


@pytest.mark.parametrize(("body", "reason"), [
    (b"", "empty"),
    (b"\x00\x00\x00", "a truncated head"),
    (_GOOD[:-1], "the last header value cut short"),
    (_GOOD[:9], "inside the topic"),
    (_GOOD[:5], "no fields at all"),
    (_GOOD + b"\x00", "one trailing byte"),
    (_GOOD + _GOOD, "two frames in one"),
    (struct.pack(">IB", 1, 99) + _GOOD[5:], "an unknown kind"),
    (struct.pack(">IB", 1, 0) + _GOOD[5:], "kind zero"),
    (struct.pack(">IB", 1, 2) + _field(None) + _field(b"k") + _field(b"v") + _U32.pack(0),
     "no topic"),
    (struct.pack(">IB", 1, 2) + _field(b"t") + _field(None) + _field(None) + _U32.pack(1)
     + _field(b"name") + _field(None), "a header without value"),
    (struct.pack(">IB", 1, 2) + _field(b"t") + _field(None) + _field(None) + _U32.pack(1)
     + _field(None) + _field(b"v"), "a header without name"),
    (struct.pack(">IB", 1, 2) + _field(b"t") + _field(None) + _field(None) + _U32.pack(1)
     + _field(b"name"), "a header name and no value field"),
    (struct.pack(">IB", 1, 2) + _field(b"t") + _field(None) + _field(None) + _U32.pack(2)
     + _field(b"n") + _field(b"v"), "fewer headers than counted"),
    (struct.pack(">IB", 1, 2) + _U32.pack(1000) + b"short", "a field longer than the frame"),
    (struct.pack(">IB", 1, 2) + _field(b"\xff\xfe") + _field(None) + _field(None)
     + _U32.pack(0), "a topic that is not UTF-8"),
    (struct.pack(">IB", 1, 2) + _field(b"t") + _field(None) + _field(None) + _U32.pack(1)
     + _field(b"\xc3") + _field(b"v"), "a header name that is not UTF-8"),
    (struct.pack(">IB", 1, 2) + _field(b"t") + _field(None) + _field(None), "no header count"),
])
def test_malformed_bodies_raise_frame_error(body: bytes, reason: str) -> None:
    with pytest.raises(FrameError):
        decode_frame(body)


async def _stream(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


async def test_read_frame_reads_frames_in_turn_and_none_at_a_clean_end() -> None:
    one = Frame(1, Kind.COMMAND, "t", b"k", b"v", [("h", b"x")])
    two = Frame(2, Kind.REPLY, "r", None, b"")
    raw = encode_frame(one) + encode_frame(two)
    # Fed a byte at a time: frames do not depend on how the stream is cut.
    reader = await _stream(*(raw[i:i + 1] for i in range(len(raw))))
    first, second = await read_frame(reader), await read_frame(reader)
    assert first is not None and second is not None
    _same(first, one)
    _same(second, two)
    assert await read_frame(reader) is None
    assert await read_frame(await _stream()) is None


@pytest.mark.parametrize("raw", [
    b"\x00\x00",  # inside the length
    encode_frame(Frame(1, Kind.COMMAND, "topic"))[:-1],  # inside the frame
    encode_frame(Frame(1, Kind.COMMAND, "topic"))[:4],  # a length and nothing after it
])
async def test_a_stream_ending_inside_a_frame_is_a_frame_error(raw: bytes) -> None:
    with pytest.raises(FrameError):
        await read_frame(await _stream(raw))


async def test_an_oversized_length_is_refused_before_reading_the_body() -> None:
    # No body follows and no end of stream: a reader that trusted the length would wait.
    reader = await _stream(_U32.pack(MAX_FRAME + 1), eof=False)
    with pytest.raises(FrameError, match="at most"):
        await asyncio.wait_for(read_frame(reader), 1)
    body = _body(Frame(1, Kind.COMMAND, "t", value=b"x" * 10))
    assert await read_frame(await _stream(_U32.pack(len(body)) + body)) is not None


async def test_a_malformed_body_in_the_stream_is_a_frame_error() -> None:
    body = struct.pack(">IB", 1, 99) + _GOOD[5:]
    with pytest.raises(FrameError):
        await read_frame(await _stream(_U32.pack(len(body)) + body))


# -- addresses and settings -----------------------------------------------------------------

@pytest.mark.parametrize(("address", "parsed"), [
    ("127.0.0.1:7000", ("127.0.0.1", 7000)),
    ("[::1]:7000", ("::1", 7000)),
    ("host:1", ("host", 1)),
    ("participant.internal:65535", ("participant.internal", 65535)),
])
def test_parse_address_accepts(address: str, parsed: tuple[str, int]) -> None:
    assert parse_address(address) == parsed


@pytest.mark.parametrize("address", ["nope", ":80", "h:0", "h:70000", "h:x", "h:", "", "h:-1",
                                     "h: 80"])
def test_parse_address_rejects(address: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        parse_address(address)


@pytest.mark.parametrize("address", ["[]:80", "[:80"])
def test_parse_address_rejects_an_empty_bracketed_host(address: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        parse_address(address)


def test_participant_direct_listen(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ParticipantSettings(dsn="postgresql://x").direct_listen is None
    assert ParticipantSettings(dsn="postgresql://x", direct_listen="").direct_listen is None
    monkeypatch.setenv("SAGAFLOW_PARTICIPANT_DIRECT_LISTEN", "0.0.0.0:7001")
    assert ParticipantSettings(dsn="postgresql://x").direct_listen == "0.0.0.0:7001"
    for bad in ("nope", "h:0", "h:x"):
        with pytest.raises(ValidationError, match=r"(?s)direct_listen.*is not host:port"):
            ParticipantSettings(dsn="postgresql://x", direct_listen=bad)


def test_coordinator_direct_endpoints_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert CoordinatorSettings(dsn="postgresql://x").direct_endpoints == {}
    monkeypatch.setenv("SAGAFLOW_DIRECT_ENDPOINTS",
                       "payments=127.0.0.1:7001, inventory=127.0.0.1:7002")
    assert CoordinatorSettings(dsn="postgresql://x").direct_endpoints == {
        "payments": "127.0.0.1:7001", "inventory": "127.0.0.1:7002"}


@pytest.mark.parametrize(("raw", "reason"), [
    ("payments", "is not name=host:port"),
    ("=127.0.0.1:7001", "is not name=host:port"),
    ("payments=nope", "is not host:port"),
    ("payments=127.0.0.1:7001,inventory=h:0", "is not host:port"),
])
def test_coordinator_refuses_bad_endpoints(monkeypatch: pytest.MonkeyPatch, raw: str,
                                           reason: str) -> None:
    monkeypatch.setenv("SAGAFLOW_DIRECT_ENDPOINTS", raw)
    with pytest.raises(ValidationError, match=rf"(?s)direct_endpoints.*{reason}"):
        CoordinatorSettings(dsn="postgresql://x")


def test_coordinator_direct_timeout_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CoordinatorSettings(dsn="postgresql://x").direct_timeout == timedelta(seconds=10)
    for good in (timedelta(milliseconds=10), timedelta(minutes=5)):
        assert CoordinatorSettings(dsn="postgresql://x", direct_timeout=good).direct_timeout == good
    for bad in (timedelta(0), timedelta(milliseconds=9), timedelta(minutes=5, seconds=1)):
        with pytest.raises(ValidationError, match="direct_timeout must be between"):
            CoordinatorSettings(dsn="postgresql://x", direct_timeout=bad)
    monkeypatch.setenv("SAGAFLOW_DIRECT_TIMEOUT", "250ms")
    assert CoordinatorSettings(dsn="postgresql://x").direct_timeout == timedelta(
        milliseconds=250)


def test_the_direct_token_stays_out_of_repr_and_str(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-direct-token"
    monkeypatch.setenv("SAGAFLOW_DIRECT_TOKEN", secret)
    participant = ParticipantSettings(dsn="postgresql://x")
    coordinator = CoordinatorSettings(dsn="postgresql://x")
    for shown in (participant, coordinator):
        assert shown.direct_token is not None
        assert shown.direct_token.get_secret_value() == secret
        assert secret not in repr(shown) and secret not in str(shown)
        assert secret not in repr(shown.model_dump()) and secret not in shown.model_dump_json()


# -- server and client over localhost ----------------------------------------------------------

_Reply = OutgoingReply


Answer = Callable[[InboundRecord], Awaitable[_Reply | None]]


async def _echo(record: InboundRecord) -> _Reply:
    return _Reply("replies", record.key or b"", b"re:" + (record.value or b""),
                  [*record.headers, ("topic", record.topic.encode())])


async def _started(answer: Answer, token: str = "", port: int = 0,
                   serve: Callable[[DirectServer], None] | None = None) -> DirectServer:
    """A started server on ``port``, or on a free port (parse_address refuses port 0)."""
    for _ in range(5):
        server = DirectServer(answer, f"127.0.0.1:{port or free_port()}", token=token,
                              name="test")
        if serve is not None:
            serve(server)
        try:
            await server.start()
        except SettingsError:
            if port:
                raise
            continue  # taken meanwhile by another process: another free port
        return server
    raise AssertionError("no free port")


@contextlib.asynccontextmanager
async def _server(answer: Answer, token: str = "", port: int = 0) -> AsyncIterator[DirectServer]:
    server = await _started(answer, token, port)
    try:
        yield server
    finally:
        await server.stop(grace=0.2)


@contextlib.asynccontextmanager
async def _client(port: int, token: str = "", wait: float = 2.0,
                  retry_after: float = 1.0) -> AsyncIterator[DirectClient]:
    client = DirectClient(f"127.0.0.1:{port}", token=token, timeout=wait,
                          retry_after=retry_after)
    try:
        yield client
    finally:
        await client.close()


async def test_a_taken_port_is_one_clear_settings_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = DirectServer(_echo, f"127.0.0.1:{port}", name="test")
        with pytest.raises(SettingsError, match=(
                rf"cannot serve the direct lane on 127.0.0.1:{port}: .*address already in use"
                r".*SAGAFLOW_PARTICIPANT_DIRECT_LISTEN")):
            await server.start()


async def test_a_reply_comes_back_with_its_record() -> None:
    seen: list[InboundRecord] = []

    async def answer(record: InboundRecord) -> _Reply:
        seen.append(record)
        return _Reply("p.replies", b"saga-1", b"\x00reply\xff", [("h", b"\x00\x01"), ("e", b"")])

    async with _server(answer, token="t") as server, _client(server.port, token="t") as client:
        got = await client.call("p.pay.commands", b"saga-1", b"cmd", [("m", b"\xff")])
        assert got is not None and got.kind is Kind.REPLY and got.reply is not None
        assert (got.reply.topic, got.reply.key, got.reply.value, list(got.reply.headers)) == (
            "p.replies", b"saga-1", b"\x00reply\xff", [("h", b"\x00\x01"), ("e", b"")])
        [record] = seen
        assert (record.topic, record.key, record.value, list(record.headers)) == (
            "p.pay.commands", b"saga-1", b"cmd", [("m", b"\xff")])
        assert (client.answered, client.missed, server.answered, server.refused) == (1, 0, 1, 0)


async def test_no_reply_and_redeliver() -> None:
    async def answer(record: InboundRecord) -> _Reply | None:
        if record.value == b"dead":
            return None
        if record.value == b"db-away":
            raise ConnectionError("the participant's database is away")
        return await _echo(record)

    async with _server(answer) as server, _client(server.port) as client:
        dead = await client.call("t", b"k", b"dead", [])
        away = await client.call("t", b"k", b"db-away", [])
        fine = await client.call("t", b"k", b"ok", [])
        assert dead is not None and (dead.kind, dead.reply) == (Kind.NO_REPLY, None)
        assert away is not None and (away.kind, away.reply) == (Kind.REDELIVER, None)
        assert fine is not None and fine.kind is Kind.REPLY and fine.reply is not None
        assert fine.reply.value == b"re:ok"
        assert (client.answered, client.missed, server.answered) == (3, 0, 3)


@pytest.mark.parametrize(("server_token", "client_token"), [("right", "wrong"), ("right", ""),
                                                            ("right", "righ"), ("", "extra")])
async def test_a_wrong_token_is_refused(server_token: str, client_token: str) -> None:
    ran: list[InboundRecord] = []

    async def answer(record: InboundRecord) -> _Reply:
        ran.append(record)
        return await _echo(record)

    async with _server(answer, token=server_token) as server, _client(
            server.port, token=client_token, retry_after=30) as client:
        assert await asyncio.wait_for(client.call("t", b"k", b"v", []), 3) is None
        assert (client.answered, client.missed, server.refused, server.answered) == (0, 1, 1, 0)
        # Refused: the client does not knock again within retry_after.
        assert await asyncio.wait_for(client.call("t", b"k", b"v", []), 3) is None
        assert (client.missed, server.refused) == (2, 1)
    assert ran == []


async def test_a_malformed_hello_or_command_is_refused_or_dropped() -> None:
    ran: list[InboundRecord] = []

    async def answer(record: InboundRecord) -> _Reply:
        ran.append(record)
        return await _echo(record)

    async with _server(answer) as server:
        # A COMMAND where the HELLO belongs: refused, closed.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_frame(Frame(1, Kind.COMMAND, "t")))
        refused = await asyncio.wait_for(read_frame(reader), 2)
        assert refused is not None and refused.kind is Kind.REFUSED
        assert await asyncio.wait_for(read_frame(reader), 2) is None
        writer.close()
        # A good HELLO, then garbage: the connection is dropped, nothing runs.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_frame(Frame(0, Kind.HELLO, value=b"")))
        writer.write(_U32.pack(5) + struct.pack(">IB", 1, 99))
        assert await asyncio.wait_for(read_frame(reader), 2) is None
        writer.close()
        # A good HELLO, then a frame of a kind a coordinator does not send: dropped as well.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_frame(Frame(0, Kind.HELLO, value=b"")))
        writer.write(encode_frame(Frame(1, Kind.REPLY, "t")))
        assert await asyncio.wait_for(read_frame(reader), 2) is None
        writer.close()
        assert (server.refused, server.answered, ran) == (1, 0, [])


async def test_a_call_that_takes_longer_than_the_timeout_is_left_to_kafka() -> None:
    release = asyncio.Event()

    async def answer(record: InboundRecord) -> _Reply:
        if record.value == b"slow":
            await release.wait()
        return await _echo(record)

    async with _server(answer) as server, _client(server.port, wait=0.2) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await asyncio.wait_for(client.call("t", b"k", b"slow", []), 3) is None
        assert loop.time() - started < 1.5
        assert (client.answered, client.missed) == (0, 1)
        release.set()  # its late answer is dropped; the connection still serves
        fine = await client.call("t", b"k", b"fast", [])
        assert fine is not None and fine.reply is not None and fine.reply.value == b"re:fast"
        assert (client.answered, client.missed) == (1, 1)


async def test_the_server_stopping_mid_call_gives_none_not_a_hang() -> None:
    entered = asyncio.Event()

    async def answer(record: InboundRecord) -> _Reply:
        entered.set()
        await asyncio.Event().wait()  # never answers
        raise AssertionError("unreachable")

    server = await _started(answer)
    async with _client(server.port, wait=30) as client:
        call = asyncio.create_task(client.call("t", b"k", b"v", []))
        await asyncio.wait_for(entered.wait(), 2)
        await asyncio.wait_for(server.stop(grace=0.1), 3)
        assert await asyncio.wait_for(call, 3) is None
        assert client.missed == 1


async def test_after_a_failed_connect_the_lane_rests_for_retry_after() -> None:
    port = free_port()
    async with _client(port, retry_after=0.5) as client:
        loop = asyncio.get_running_loop()
        failed_at = loop.time()
        assert await client.call("t", b"k", b"v", []) is None  # nothing listens
        async with _server(_echo, port=port):
            # A server is there now, but the lane is resting: the call goes to Kafka.
            assert await client.call("t", b"k", b"v", []) is None
            assert loop.time() - failed_at < 0.5
            assert client.missed == 2
            await asyncio.sleep(0.55 - (loop.time() - failed_at))
            got = await client.call("t", b"k", b"v", [])
            assert got is not None and got.kind is Kind.REPLY
            assert (client.answered, client.missed) == (1, 2)


async def test_concurrent_calls_share_one_connection_and_get_their_own_answers() -> None:
    connections = 0
    gates = {i: asyncio.Event() for i in range(40)}

    async def answer(record: InboundRecord) -> _Reply | None:
        i = int(record.value or b"")
        await gates[i].wait()
        if i % 10 == 3:
            return None
        if i % 10 == 7:
            raise RuntimeError("later")
        return await _echo(record)


    def count_connections(server: DirectServer) -> None:
        original = server._serve

        async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            await original(reader, writer)

        server._serve = counting  # type: ignore[method-assign]

    server = await _started(answer, serve=count_connections)
    try:
        async with _client(server.port) as client:
            calls = [asyncio.create_task(client.call("t", f"k{i}".encode(), str(i).encode(),
                                                     [("i", str(i).encode())]))
                     for i in range(40)]
            await asyncio.sleep(0.1)
            for i in reversed(range(40)):  # answered in the opposite order
                gates[i].set()
                await asyncio.sleep(0)
            answers = await asyncio.wait_for(asyncio.gather(*calls), 5)
            for i, got in enumerate(answers):
                assert got is not None
                if i % 10 == 3:
                    assert got.kind is Kind.NO_REPLY
                elif i % 10 == 7:
                    assert got.kind is Kind.REDELIVER
                else:
                    assert got.kind is Kind.REPLY and got.reply is not None
                    assert (got.reply.key, got.reply.value) == (f"k{i}".encode(),
                                                                f"re:{i}".encode())
                    assert ("i", str(i).encode()) in got.reply.headers
            assert (client.answered, client.missed, connections) == (40, 0, 1)
    finally:
        await server.stop(grace=0.2)


async def test_the_client_reconnects_after_the_connection_broke() -> None:
    async with _server(_echo) as server:
        port = server.port
        async with _client(port) as client:
            assert await client.call("t", b"k", b"1", []) is not None
            await server.stop(grace=0.1)
            await server.start()  # on the same port
            # The old connection is gone; the next call opens a new one.
            got = await asyncio.wait_for(client.call("t", b"k", b"2", []), 3)
            if got is None:  # the break was seen by this call: the one after it connects
                got = await asyncio.wait_for(client.call("t", b"k", b"3", []), 3)
            assert got is not None and got.kind is Kind.REPLY


async def test_stop_does_not_wait_its_grace_for_an_idle_connection() -> None:
    server = await _started(_echo)
    async with _client(server.port) as client:
        assert await client.call("t", b"k", b"v", []) is not None  # connected, now idle
        loop = asyncio.get_running_loop()
        started = loop.time()
        await server.stop(grace=2.0)
        assert loop.time() - started < 1.0
