"""``saga update SAGA NAME``: send a saga an update and print its answer once the saga
applied it; ``saga update SAGA NAME --answer UPDATE_ID``: fetch the stored answer of an id.

A rejected update exits 1 with the validator's reason (nothing was applied); a saga that
stayed busy past ``--wait`` exits 3 with ``update_timed_out`` (nothing was applied: send the
same ``--update-id`` again). Without ``--update-id`` a new id is made and printed."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from typing import Any, TextIO

import httpx

__all__ = ["add_update_command", "render_update", "update_handler"]

Call = Callable[..., Any]


def add_update_command(p: argparse.ArgumentParser, json_arg: Callable[[str], Any],
                       saga_help: str) -> None:
    p.add_argument("saga_id", help=saga_help)
    p.add_argument("name", help="the update's name (declared on the saga's class)")
    p.add_argument("--payload", type=json_arg, default={}, help="the payload (JSON object)")
    p.add_argument("--update-id", dest="update_id",
                   help="your id for it: sending it again returns the stored answer "
                        "(default: a new id)")
    p.add_argument("--wait", type=float, default=10.0, metavar="SECONDS",
                   help="how long the saga may take to answer (default 10, at most 300)")
    p.add_argument("--answer", metavar="UPDATE_ID",
                   help="send nothing: fetch the stored answer of this update id")


def update_handler(call: Call, find_saga: Callable[[httpx.Client, str], str],
                   error: type[Exception]) -> Callable[[httpx.Client, argparse.Namespace], Any]:
    """The ``update`` command: POST (or GET with ``--answer``), a rejection as an error."""

    def handler(client: httpx.Client, args: argparse.Namespace) -> Any:
        saga = find_saga(client, args.saga_id)
        if args.answer:
            data = call(client, "GET", f"/sagas/{saga}/updates/{args.name}/{args.answer}")
        else:
            if not 0 < args.wait <= 300:
                raise error("--wait must be more than 0 and at most 300 seconds", 2)
            body = {"update_id": args.update_id or str(uuid.uuid4()),
                    "payload": args.payload, "wait_seconds": args.wait}
            data = call(client, "POST", f"/sagas/{saga}/updates/{args.name}", json=body,
                        timeout=httpx.Timeout(args.timeout, read=args.wait + 10))
        if data.get("outcome") == "rejected":
            raise error(f"update {data['name']} ({data['update_id']}) to saga "
                        f"{data['saga_id']} rejected: {data['reason']}", 1)
        return data

    return handler


def render_update(data: dict[str, Any], out: TextIO) -> None:
    again = " (the stored answer: applied before, nothing changed now)" \
        if data["duplicate"] else ""
    out.write(f"update {data['name']} ({data['update_id']}) to saga {data['saga_id']}: "
              f"{data['outcome']}{again}\n")
    if data["outcome"] == "accepted":
        out.write(json.dumps(data["result"], indent=2) + "\n")
    else:
        out.write(f"reason: {data['reason']}\n")
