"""The web UI's pure parts: the step tree, id-prefix bounds, the SVG machine, the session
cookie and the CSRF check, the trace layout."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import pytest
from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.auth import Principal, Role
from coordinator.engine import compile_saga
from coordinator.ui.diagram_svg import state_svg
from coordinator.ui.queries import id_range
from coordinator.ui.session import CsrfRefused, SessionCodec, check_csrf
from coordinator.ui.settings import UiSettings
from coordinator.ui.steps import step_tree
from coordinator.ui.trace import span_rows, trace_id_of
from examples.order_saga import OrderSaga

TRACE = json.loads((Path(__file__).parents[2] / "docs" / "trace.json").read_text())


def _keys(steps: list[dict[str, object]]) -> list[tuple[int, str]]:
    return [(row.depth, str(row.step["key"])) for row in step_tree(steps)]


def test_steps_nest_under_their_parent_key_or_their_key_prefix() -> None:
    steps: list[dict[str, object]] = [
        {"key": "charge"}, {"key": "ship"}, {"key": "ship[0].label", "parent": "ship[0]"},
        {"key": "ship[0]", "parent": "ship"}, {"key": "ship[1]"}, {"key": "ship[1].charge"},
        {"key": "notify", "parent": "gone"},
    ]
    assert _keys(steps) == [(0, "charge"), (0, "ship"), (1, "ship[0]"), (2, "ship[0].label"),
                            (1, "ship[1]"), (2, "ship[1].charge"), (0, "notify")]


def test_a_parent_cycle_still_shows_every_step() -> None:
    steps: list[dict[str, object]] = [{"key": "a", "parent": "b"}, {"key": "b", "parent": "a"}]
    assert sorted(k for _, k in _keys(steps)) == ["a", "b"]


def test_id_prefix_bounds() -> None:
    assert id_range("3FA8-5f") == (UUID("3fa85f00-0000-0000-0000-000000000000"),
                                   UUID("3fa85fff-ffff-ffff-ffff-ffffffffffff"))
    whole = "3fa85f64-5717-4562-b3fc-2c963f66afa6"
    assert id_range(whole) == (UUID(whole), UUID(whole))
    assert id_range("xyz") is None and id_range("") is None and id_range("0" * 33) is None


def test_the_tree_svg_marks_the_current_states_only() -> None:
    order = compile_saga(OrderSaga)
    svg = state_svg(order, ["reserve_stock.cancelling"])
    assert re.findall(r'<g class="([^"]*current[^"]*)" data-state="([^"]+)"', svg) == [
        ("state current", "reserve_stock")]
    # one box per step, plus confirm and the four ends
    assert svg.count('<g class="state') == len(order.steps) + 1 + 4
    assert 'class="state dead" data-state="dead"' in state_svg(order)


def test_the_tree_svg_draws_composites_as_frames() -> None:
    from coordinator.language.nodes import ForEach, Race
    from coordinator.language.saga import Saga, SagaStep

    step = lambda n: SagaStep(n, "p", "do", compensable=True)  # noqa: E731
    cls = type("T", (Saga,), {"name": "t", "version": 1, "input_model": OrderSaga.input_model,
                              "steps": (ForEach("lines", items=lambda c: [], body=(step("a"),),
                                                max_concurrency=4),
                                        Race("quote", (step("b"), step("c"))))})
    svg = state_svg(compile_saga(cls), ["b.executing", "c.executing"])
    assert 'data-node="lines"' in svg and "for each lines (≤ 4 at once" in svg
    assert "first of quote (1 of 2 win)" in svg
    assert sorted(re.findall(r'class="state current" data-state="([^"]+)"', svg)) == ["b", "c"]


def _request(cookie: str | None = None, url: str = "https://ui.test/", **headers: str
             ) -> Request:
    scheme, rest = url.split("://", 1)
    host, _, path = rest.partition("/")
    raw = [(k.lower().replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    if cookie is not None:
        raw.append((b"cookie", cookie.encode()))
    raw.append((b"host", host.encode()))
    return Request({"type": "http", "method": "POST", "path": "/" + path, "scheme": scheme,
                    "headers": raw})


def _cookie(codec: SessionCodec, response: Response) -> str:
    header = response.headers["set-cookie"]
    return header.split(";", 1)[0]


def test_the_session_cookie_round_trips_and_refuses_tampering() -> None:
    codec = SessionCodec(UiSettings(session_secret="s3cret-s3cret"))
    session = codec.load(_request())
    assert session.sid is None and session.dirty
    session.sign_in(Principal("olga", Role.OPERATOR), "session-id-1")
    response = Response()
    codec.save(session, _request(), response)
    assert "HttpOnly" in response.headers["set-cookie"]
    assert "SameSite=strict" in response.headers["set-cookie"]
    cookie = _cookie(codec, response)
    assert "olga" not in cookie  # who signed in stays on the server
    again = codec.load(_request(cookie))
    assert again.sid == "session-id-1" and again.principal is None
    assert again.csrf == session.csrf
    name, value = cookie.split("=", 1)
    forged = codec.load(_request(f"{name}={value[:-2]}xx"))
    assert forged.sid is None
    other_key = SessionCodec(UiSettings(session_secret="another-key"))
    assert other_key.load(_request(cookie)).sid is None


def test_the_session_cookie_ends_after_its_max_age() -> None:
    codec = SessionCodec(UiSettings(session_secret="k" * 12, session_max_age=timedelta(seconds=1)))
    session = codec.load(_request())
    session.sign_in(Principal("vera", Role.VIEWER), "session-id-2")
    response = Response()
    codec.save(session, _request(), response)
    cookie = _cookie(codec, response)
    assert codec.load(_request(cookie)).sid is not None
    time.sleep(2.1)
    assert codec.load(_request(cookie)).sid is None


@pytest.mark.parametrize(("url", "secure"), [
    ("https://ui.example/", True),
    ("http://ui.example/", True),  # behind a TLS proxy, or a mistake: stay safe
    ("http://10.0.0.5:8080/", True),
    ("https://localhost/", True),
    ("http://localhost:8080/", False),
    ("http://127.0.0.1:8080/", False),
    ("http://[::1]:8080/", False),
])
def test_cookies_are_secure_unless_served_on_loopback_http(url: str, secure: bool) -> None:
    codec = SessionCodec(UiSettings(session_secret="k" * 12))
    session = codec.load(_request(url=url))
    response = Response()
    codec.save(session, _request(url=url), response)
    header = response.headers["set-cookie"]
    assert ("; secure" in header.lower()) is secure, header
    assert header.startswith("__Host-sagaflow=" if secure else "sagaflow_session="), header
    forced = SessionCodec(UiSettings(session_secret="k" * 12, secure_cookies=not secure))
    assert forced.secure(_request(url=url)) is (not secure)


def test_csrf_needs_the_session_token_and_our_origin() -> None:
    codec = SessionCodec(UiSettings(session_secret="k" * 12))
    session = codec.load(_request())
    check_csrf(_request(origin="http://ui.test"), session, {"csrf_token": session.csrf})
    for request, form in [
        (_request(), {}),
        (_request(), {"csrf_token": session.csrf[:-1] + "x"}),
        (_request(origin="http://evil.test"), {"csrf_token": session.csrf}),
        (_request(sec_fetch_site="cross-site"), {"csrf_token": session.csrf}),
    ]:
        with pytest.raises(CsrfRefused):
            check_csrf(request, session, form)


def test_the_trace_layout_nests_spans_and_hides_database_clients() -> None:
    view = span_rows(TRACE)
    with_db = span_rows(TRACE, with_db=True)
    assert len(with_db.rows) == len(TRACE["spans"]) > len(view.rows) > 0
    assert all("db.system" not in r.tags or r.tags.get("span.kind") != "client"
               for r in view.rows)
    assert view.rows[0].depth == 0 and view.rows[0].offset == 0
    assert all(0 <= r.offset <= 1 and 0 <= r.offset + r.width <= 1 + 1e-9 for r in view.rows)
    depth = 0
    for row in view.rows:  # depth-first: a row is at most one level below the row before it
        assert row.depth <= depth + 1
        depth = row.depth


def test_trace_id_from_traceparent() -> None:
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of({"traceparent": f"00-{tid}-00f067aa0ba902b7-01"}) == tid
    assert trace_id_of({}) is None
    assert trace_id_of({"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"}) is None


async def test_fetch_trace_says_why_there_is_no_trace() -> None:
    import httpx

    from coordinator.ui.trace import fetch_trace

    tid = TRACE["traceID"]

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == f"/api/traces/{tid}":
            return httpx.Response(200, json={"data": [TRACE]})
        if request.url.path.endswith("/" + "e" * 32):
            return httpx.Response(500)
        return httpx.Response(404, json={"errors": [{"code": 404, "msg": "trace not found"}]})

    mock = httpx.MockTransport(answer)
    got = await fetch_trace("http://jaeger", tid, wait=1, transport=mock)
    assert got.problem is None and got.view is not None and got.view.trace_id == tid
    missing = await fetch_trace("http://jaeger", "f" * 32, wait=1, transport=mock)
    assert missing.view is None and "no trace" in str(missing.problem)
    broken = await fetch_trace("http://jaeger", "e" * 32, wait=1, transport=mock)
    assert "HTTP 500" in str(broken.problem)
    off = await fetch_trace(None, tid, wait=1)
    assert "SAGAFLOW_JAEGER_QUERY" in str(off.problem)
    down = await fetch_trace("http://127.0.0.1:9", tid, wait=1)
    assert "did not answer" in str(down.problem)


def test_a_step_in_flight_shows_its_running_time_and_a_finished_one_its_duration() -> None:
    from datetime import UTC, datetime

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    two = t0 + timedelta(seconds=2)
    steps = [{"key": "a", "phase": "tried", "started_at": t0, "finished_at": two,
              "phase_changed_at": two},
             {"key": "b", "phase": "cancelling", "started_at": t0, "finished_at": two,
              "phase_changed_at": two + timedelta(seconds=3)}]
    done, cancelling = step_tree(steps, now=t0 + timedelta(seconds=12))
    assert (done.seconds, done.running) == (2.0, False)
    assert (cancelling.seconds, cancelling.running) == (7.0, True)
    _, still = step_tree(steps)  # no now (a finished or dead saga): no running time
    assert (still.seconds, still.running) == (2.0, False)


def test_the_retry_view_says_when_a_step_tries_again_and_gives_up_at_the_latest() -> None:
    from datetime import UTC, datetime

    from coordinator.engine.simulate import Simulator
    from coordinator.store import TimerRecord
    from coordinator.ui.retries import phase_policies, step_retries
    from participant_sdk.protocol import Outcome
    from tests.unit.test_engine_fixtures import AllSaga, compiled

    definition = compiled(AllSaga)
    sim = Simulator(definition)
    sim.start({})
    t0 = sim.current.steps["s1"].outstanding.sent_at  # type: ignore[union-attr]
    (view,) = step_retries(definition, sim.current, []).values()
    # FAST: 3 attempts, 1 s backoff doubling up to 4 s; deadline 30 s (the default)
    assert (view.phase, view.used, view.max_attempts, view.next_what) == ("action", 1, 3,
                                                                          "reply due")
    assert view.next_at == t0 + timedelta(seconds=30)
    assert view.gives_up_by == t0 + timedelta(seconds=30 + 1 + 30 + 2 + 30)
    sim.reply(Outcome.FAILED)
    step = sim.current.steps["s1"]
    assert step.retry_timer is not None
    due = datetime(2026, 1, 1, tzinfo=UTC)
    timer = TimerRecord(step.retry_timer, sim.current.saga_id, due, "s1", "action", 1, "retry")
    (view,) = step_retries(definition, sim.current, [timer]).values()
    assert (view.next_what, view.next_at) == ("retry", due)
    assert view.gives_up_by == due + timedelta(seconds=30 + 2 + 30)
    texts = dict(phase_policies(definition.step("s1")))
    assert texts["action"].startswith("3 attempts, backoff 1 s times 2 up to 4 s")
    assert texts["compensate"].startswith("3 attempts, backoff 2 s times 2 up to 10 s")
