"""``saga definitions ...``: upload, list, show and diff sagas declared as data over the
operator API (``/saga-definitions``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import httpx

from coordinator.cli.ops.render import table

__all__ = ["add_definition_commands", "handler", "render_definitions"]

Call = Callable[..., Any]
_ACTIONS = ("list", "show", "upload", "diff")


def add_definition_commands(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=_ACTIONS)
    p.add_argument("target", nargs="?",
                   help="upload: the file (YAML or JSON); show, diff, list: the saga type")
    p.add_argument("versions", nargs="*", type=int,
                   help="show: the version; diff: FROM TO")


def handler(call: Call, error: Callable[[str, int], Exception]
            ) -> Callable[[httpx.Client, argparse.Namespace], Any]:
    """The command, raising ``error(message, exit_code)`` for a usage or API problem."""

    def run(client: httpx.Client, args: argparse.Namespace) -> Any:
        a, target, versions = args.action, args.target, args.versions
        if a == "list":
            return call(client, "GET", "/saga-definitions",
                        params={"name": target} if target else {})
        if not target:
            raise error(f"definitions {a} needs a {'file' if a == 'upload' else 'saga type'}", 2)
        if a == "upload":
            return _upload(call, client, Path(target), error)
        name = quote(target, safe="")
        if a == "show" and len(versions) == 1:
            return call(client, "GET", f"/saga-definitions/{name}/{versions[0]}")
        if a == "diff" and len(versions) == 2:
            return call(client, "GET", f"/saga-definitions/{name}/diff",
                        params={"from": versions[0], "to": versions[1]})
        raise error("definitions show needs TYPE VERSION; diff needs TYPE FROM TO", 2)

    return run


def _upload(call: Call, client: httpx.Client, path: Path,
            error: Callable[[str, int], Exception]) -> Any:
    try:
        body = path.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror}", 2) from None
    kind = "application/json" if path.suffix == ".json" else "application/yaml"
    response = client.post("/saga-definitions", content=body, headers={"Content-Type": kind})
    if response.status_code == 422:  # the problems, one line each, as `validate` prints them
        details = (response.json().get("error") or {}).get("details") or {}
        lines = [f"{path}: {p['path'] or '(file)'}: {p['message']}"
                 for p in details.get("problems", [])]
        raise error("the definition was refused:\n" + "\n".join(lines), 1)
    if response.status_code >= 400:  # the usual error message, through the shared call
        return call(client, "POST", "/saga-definitions", content=body,
                    headers={"Content-Type": kind})
    return response.json()


def render_definitions(args: argparse.Namespace, data: Any, out: TextIO) -> None:
    if args.action == "list":
        out.write(table(data["items"], ["name", "version", "uploaded_by", "uploaded_at",
                                        "registered"]))
    elif args.action == "diff":
        for key in ("states_added", "states_removed", "steps_added", "steps_removed",
                    "steps_changed"):
            out.writelines(f"{key}: {item}\n" for item in data[key])
        out.write(f"input_schema_changed: {data['input_schema_changed']}\n")
    else:
        out.write(f"{data['name']} v{data['version']}, uploaded by {data['uploaded_by']} at "
                  f"{data['uploaded_at']}\n")
        out.writelines(f"  {line}\n" for line in data.get("compatibility", []))
        if args.action == "show":
            out.write(json.dumps(data["definition"], indent=2) + "\n")
