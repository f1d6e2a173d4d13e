"""The span keeper's spool: requests kept in arrival order, replayed to a receiver before any
new one, and kept again when the receiver fails. A receiver here is a real local HTTP server
that records what it is sent (Jaeger itself: tests/e2e/test_trace_buffer.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack.trace_buffer import Spool

PROTOBUF = {"Content-Type": "application/x-protobuf"}


class Receiver:
    def __init__(self) -> None:
        self.got: list[tuple[str, str, bytes]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append((self.path, self.headers["Content-Type"], body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


def test_kept_requests_are_replayed_in_order_then_forwarded(
        tmp_path: Path, receiver: Receiver) -> None:
    spool = Spool(tmp_path / "spool")
    for n in range(3):
        spool.take("/v1/traces", PROTOBUF, f"batch {n}".encode())
    assert receiver.got == []
    assert spool.hand_over(receiver.url) == 3
    spool.take("/v1/traces", PROTOBUF, b"batch 3")  # after the hand-over: sent at once
    assert [body for _, _, body in receiver.got] == [b"batch 0", b"batch 1", b"batch 2",
                                                     b"batch 3"]
    assert {(path, kind) for path, kind, _ in receiver.got} == {
        ("/v1/traces", "application/x-protobuf")}
    assert not list((tmp_path / "spool").iterdir())


def test_a_spool_survives_a_restart_of_the_keeper(tmp_path: Path, receiver: Receiver) -> None:
    Spool(tmp_path / "spool").take("/v1/traces", PROTOBUF, b"before the restart")
    again = Spool(tmp_path / "spool")
    again.take("/v1/traces", PROTOBUF, b"after it")
    again.hand_over(receiver.url)
    assert [body for _, _, body in receiver.got] == [b"before the restart", b"after it"]


def test_a_failing_receiver_keeps_the_request(tmp_path: Path, receiver: Receiver) -> None:
    spool = Spool(tmp_path / "spool")
    spool.hand_over(receiver.url)
    receiver.status = 503
    spool.take("/v1/traces", PROTOBUF, b"kept for later")
    assert [p.name for p in (tmp_path / "spool").glob("*.req")] == ["1.req"]
    assert not spool.forwarding
    spool.take("/v1/traces", PROTOBUF, b"behind it")  # queued behind, not sent ahead
    assert [p.name for p in (tmp_path / "spool").glob("*.req")] == ["1.req", "2.req"]
    receiver.status = 200
    spool.hand_over(receiver.url)
    assert [body for _, _, body in receiver.got][-2:] == [b"kept for later", b"behind it"]
    assert spool.forwarding and not list((tmp_path / "spool").glob("*.req"))


def test_a_hand_over_to_nobody_loses_nothing(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    spool.take("/v1/traces", PROTOBUF, b"kept")
    with pytest.raises(OSError):
        spool.hand_over("http://127.0.0.1:9")
    assert [p.name for p in (tmp_path / "spool").glob("*.req")] == ["1.req"]
    assert not spool.forwarding
