"""``saga definitions``: the requests it sends and what it prints (the API is a mock
transport; the routes run on real Postgres in tests/integration/test_definitions_api.py)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator.cli.ops import main as saga_cli

ROOT = Path(__file__).resolve().parents[3]
STORED = {"name": "order", "version": 2, "uploaded_by": "ada", "digest": "d",
          "uploaded_at": "2026-01-01T00:00:00Z", "registered": True,
          "definition": {"name": "order"},
          "compatibility": ["BREAKING  input.coupon: new required field"]}


def _run(argv: list[str], answer: dict[str, Any], status: int = 200
         ) -> tuple[int, str, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=answer)

    out = io.StringIO()
    code = saga_cli(["--url", "http://api", "--token", "t", *argv], out=out,
                    transport=httpx.MockTransport(handler))
    return code, out.getvalue(), seen


def test_upload_sends_the_file_as_yaml_and_prints_the_compatibility() -> None:
    code, out, seen = _run(["definitions", "upload", str(ROOT / "examples/order_saga.yaml")],
                           STORED, 201)
    assert code == 0
    assert (seen[0].method, seen[0].url.path) == ("POST", "/saga-definitions")
    assert seen[0].headers["Content-Type"] == "application/yaml"
    assert seen[0].content == (ROOT / "examples/order_saga.yaml").read_bytes()
    assert "order v2, uploaded by ada" in out and "BREAKING  input.coupon" in out


def test_a_refused_upload_lists_every_problem_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "bad.json"
    file.write_text("{}")
    refused = {"error": {"code": "invalid_definition", "message": "2 problems", "details": {
        "problems": [{"path": "name", "message": "Field required"},
                     {"path": "", "message": "too big"}]}}}
    code, _, seen = _run(["definitions", "upload", str(file)], refused, 422)
    assert code == 1 and seen[0].headers["Content-Type"] == "application/json"
    err = capsys.readouterr().err
    assert f"{file}: name: Field required" in err and f"{file}: (file): too big" in err


@pytest.mark.parametrize(("argv", "path", "params"), [
    (["definitions", "list"], "/saga-definitions", {}),
    (["definitions", "list", "order"], "/saga-definitions", {"name": "order"}),
    (["definitions", "show", "order", "2"], "/saga-definitions/order/2", {}),
    (["definitions", "diff", "order", "1", "2"], "/saga-definitions/order/diff",
     {"from": "1", "to": "2"}),
])
def test_list_show_and_diff_read_their_routes(argv: list[str], path: str,
                                              params: dict[str, str]) -> None:
    answer = {"items": [STORED]} if argv[1] == "list" else STORED | {
        k: [] for k in ("states_added", "states_removed", "steps_added", "steps_removed",
                        "steps_changed")} | {"input_schema_changed": False}
    code, out, seen = _run(argv, answer)
    assert code == 0, out
    assert seen[0].url.path == path and dict(seen[0].url.params) == params
    assert out


def test_show_without_a_version_is_a_usage_error() -> None:
    assert _run(["definitions", "show", "order"], {})[0] == 2
