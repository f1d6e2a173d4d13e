"""``saga migrate-dry-run``: the request it sends and what it prints (the API is a mock
transport; the route is tested on real Postgres in tests/integration/test_api_migrations.py)."""

from __future__ import annotations

import io
import json

import httpx

from coordinator.cli.ops import main as saga_cli

ANSWER = {"saga_type": "order", "from_version": 1, "to_version": 2, "migration": "v1->v2",
          "total": 2, "can_move": 1, "cannot_move": 1, "items": [
              {"saga_id": "a", "can_move": True, "problems": []},
              {"saga_id": "b", "can_move": False, "problems": ["ship: busy", "x: gone"]}]}


def test_dry_run_posts_the_versions_and_lists_the_sagas_that_cannot_move() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    out = io.StringIO()
    code = saga_cli(["--url", "http://api", "--token", "t", "migrate-dry-run", "order", "1",
                     "2"], out=out, transport=httpx.MockTransport(handler))
    assert code == 0
    [request] = seen
    assert (request.method, request.url.path) == ("POST", "/migrations/dry-run")
    assert json.loads(request.content) == {"saga_type": "order", "from_version": 1,
                                           "to_version": 2, "limit": 1000}
    assert out.getvalue() == ("order v1 -> v2 (v1->v2): 1 of 2 live sagas can move, "
                              "1 cannot\n  b: ship: busy; x: gone\n")


def test_migrate_posts_the_job_and_prints_the_sagas_that_did_not_move() -> None:
    job = {"job_id": "j-1", "saga_type": "order", "from_version": 1, "to_version": 2,
           "reason": "r", "actor": "olga", "status": "done", "total": 2,
           "counts": {"applied": 1, "refused": 1},
           "items": [{"saga_id": "a", "outcome": "applied", "message": None},
                     {"saga_id": "b", "outcome": "refused", "message": "ship: busy"}]}
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json=job)

    out = io.StringIO()
    code = saga_cli(["--url", "http://api", "--token", "t", "migrate", "order", "1", "2",
                     "-r", "ship renamed"], out=out, transport=httpx.MockTransport(handler))
    assert code == 0
    assert json.loads(seen[0].content) == {"saga_type": "order", "from_version": 1,
                                           "to_version": 2, "reason": "ship renamed",
                                           "max_sagas": 1000}
    assert out.getvalue() == ("migration job j-1 order v1 -> v2: done, 2 sagas (1 applied, "
                              "1 refused)\n  b: refused: ship: busy\n")
