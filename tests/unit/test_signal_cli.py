"""``saga signal`` and ``saga query``: the request each sends and what it prints (the API is
a mock transport; the routes are tested on real Postgres in tests/integration/)."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx

from coordinator.cli.ops import main as saga_cli

SAGA = "2f6c0000-0000-4000-8000-000000000001"


def _run(argv: list[str], answer: dict[str, Any], status: int = 202
         ) -> tuple[int, str, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=answer)

    out = io.StringIO()
    code = saga_cli(["--url", "http://api", "--token", "t", *argv], out=out,
                    transport=httpx.MockTransport(handler))
    return code, out.getvalue(), seen


def test_signal_posts_the_payload_and_id_to_the_signal_route() -> None:
    answer = {"saga_id": SAGA, "signal_id": "s-1", "name": "paid", "duplicate": False,
              "started": False}
    code, out, [request] = _run(["signal", SAGA, "paid", "--payload", '{"amount": 5}',
                                 "--signal-id", "s-1"], answer)
    assert code == 0
    assert (request.method, request.url.path) == ("POST", f"/sagas/{SAGA}/signals/paid")
    assert json.loads(request.content) == {"payload": {"amount": 5}, "signal_id": "s-1"}
    assert out == f"signal paid (s-1) to saga {SAGA}: accepted\n"


def test_signal_with_start_posts_type_input_and_signal() -> None:
    answer = {"saga_id": SAGA, "signal_id": "x", "name": "paid", "duplicate": True,
              "started": False}
    code, out, [request] = _run(["signal", SAGA, "paid", "--start", "await_payment",
                                 "--input", '{"order_id": "o-1"}'], answer)
    assert code == 0
    assert request.url.path == "/signal-with-start"
    assert json.loads(request.content) == {"payload": {}, "type": "await_payment",
                                           "saga_id": SAGA, "input": {"order_id": "o-1"},
                                           "signal": "paid"}
    assert "already applied" in out


def test_signal_errors_exit_non_zero_with_the_api_message() -> None:
    body = {"error": {"code": "saga_finished", "message": "saga x is completed: it takes no "
                      "more signals", "details": None}}
    code, out, _ = _run(["signal", SAGA, "paid"], body, status=409)
    assert code != 0 and out == ""


def test_query_gets_the_query_route_and_prints_the_result() -> None:
    answer = {"saga_id": SAGA, "name": "progress", "status": "running",
              "result": {"paid": False}}
    code, out, [request] = _run(["query", SAGA, "progress"], answer, status=200)
    assert code == 0
    assert (request.method, request.url.path) == ("GET", f"/sagas/{SAGA}/queries/progress")
    assert json.loads(out) == {"paid": False}


def test_start_with_a_delay_asks_for_a_delayed_start() -> None:
    answer = {"saga_id": SAGA, "status": "scheduled"}
    code, _, [request] = _run(["--json", "start", "order", "{}", "--delay", "60"], answer,
                              status=201)
    assert code == 0
    assert json.loads(request.content) == {"type": "order", "input": {},
                                           "delay_seconds": 60.0}
