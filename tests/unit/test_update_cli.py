"""``saga update``: the request it sends, what it prints, and its exit codes (the API is a
mock transport; the route is tested on real Postgres in tests/integration/)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_signal_cli import SAGA, _run

ACCEPTED = {"saga_id": SAGA, "update_id": "u-1", "name": "change_address",
            "outcome": "accepted", "result": {"address": "2 New St"}, "reason": None,
            "answered_at": "2026-01-01T00:00:00Z", "duplicate": False}


def test_update_posts_the_payload_id_and_wait_and_prints_the_result() -> None:
    code, out, [request] = _run(["update", SAGA, "change_address", "--payload",
                                 '{"address": "2 New St"}', "--update-id", "u-1",
                                 "--wait", "2.5"], ACCEPTED, 200)
    assert code == 0
    assert (request.method, request.url.path) == (
        "POST", f"/sagas/{SAGA}/updates/change_address")
    assert json.loads(request.content) == {"update_id": "u-1", "wait_seconds": 2.5,
                                           "payload": {"address": "2 New St"}}
    assert out == (f"update change_address (u-1) to saga {SAGA}: accepted\n"
                   + json.dumps({"address": "2 New St"}, indent=2) + "\n")


def test_update_makes_an_id_when_none_is_given() -> None:
    _, _, [request] = _run(["update", SAGA, "change_address"], ACCEPTED, 200)
    assert len(json.loads(request.content)["update_id"]) == 36


def test_a_rejected_update_exits_1_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    rejected: dict[str, Any] = {**ACCEPTED, "outcome": "rejected", "result": None,
                                "reason": "already shipped"}
    code, out, _ = _run(["update", SAGA, "change_address", "--update-id", "u-1"], rejected, 200)
    assert (code, out) == (1, "")
    assert capsys.readouterr().err == (
        f"error: update change_address (u-1) to saga {SAGA} rejected: already shipped\n")


def test_a_timed_out_update_exits_3_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    error = {"error": {"code": "update_timed_out", "message": "nothing was applied"}}
    code, _, _ = _run(["update", SAGA, "change_address", "--update-id", "u-1"], error, 504)
    assert code == 3
    assert "update_timed_out" in capsys.readouterr().err


def test_answer_fetches_the_stored_answer_of_an_id() -> None:
    code, out, [request] = _run(["update", SAGA, "change_address", "--answer", "u-1"],
                                {**ACCEPTED, "duplicate": True}, 200)
    assert code == 0
    assert (request.method, request.url.path) == (
        "GET", f"/sagas/{SAGA}/updates/change_address/u-1")
    assert "the stored answer" in out


def test_a_wait_out_of_bounds_is_a_usage_error() -> None:
    code, _, seen = _run(["update", SAGA, "change_address", "--wait", "0"], ACCEPTED, 200)
    assert (code, seen) == (2, [])
