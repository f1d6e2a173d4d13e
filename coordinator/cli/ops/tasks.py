"""``saga tasks ...``: the inbox (list), one task with its form (show), and claim, unclaim,
complete, reassign, delegate and comment, as the token's person, over the operator API.

``complete`` takes the form as ``--field name=value`` pairs (each value read by the type
the task's form schema gives the field: numbers, booleans, lists and objects as JSON, the
rest as text) and/or ``--data '{"...": ...}'`` (``--json`` is the CLI's output switch).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import httpx

from coordinator.cli.ops.render import page_params, table, write_next_page

__all__ = ["add_task_commands", "check", "render_tasks", "run"]

Call = Callable[..., Any]
_ACTIONS = ("list", "show", "claim", "unclaim", "complete", "reassign", "delegate", "comment")
_COLUMNS = ["id", "title", "saga_type", "node", "priority", "due_at", "overdue", "assignee"]
_JSON_TYPES = frozenset({"integer", "number", "boolean", "array", "object", "null"})


def add_task_commands(p: argparse.ArgumentParser) -> None:
    """The ``tasks`` command's arguments: an action, then its options."""
    p.add_argument("action", choices=_ACTIONS)
    p.add_argument("id", nargs="?", help="the task id (every action but list)")
    p.add_argument("text", nargs="?", help="comment: the comment's text")
    p.add_argument("--scope", choices=["inbox", "mine", "available", "all"], default="inbox",
                   help="list: yours and open to you (inbox), held by you (mine), open to "
                        "claim (available), every task (all, admins)")
    p.add_argument("--state", choices=["open", "completed", "rejected", "expired",
                                       "cancelled"], help="list: state (default open)")
    p.add_argument("--any-state", dest="any_state", action="store_true",
                   help="list: every state")
    p.add_argument("--overdue", action="store_true", help="list: only overdue tasks")
    p.add_argument("--saga-type", dest="saga_type")
    p.add_argument("--saga-id", dest="saga_id")
    p.add_argument("--min-priority", dest="min_priority", type=int)
    p.add_argument("--assignee")
    p.add_argument("--group", dest="candidate_group", help="list: offered to this group")
    p.add_argument("--title", dest="title_text", help="list: words in the title")
    p.add_argument("--limit", type=int, default=50, help="list: page size (default 50)")
    p.add_argument("--cursor", help="list: the next_cursor of the previous page")
    p.add_argument("--field", "-f", action="append", default=[], metavar="NAME=VALUE",
                   help="complete: one field of the form (repeatable)")
    p.add_argument("--data", help="complete: the form as a JSON object (--field wins)")
    p.add_argument("--to", dest="to_user", help="reassign, delegate: the person")
    p.add_argument("--return-to-owner", dest="return_to_owner", action="store_true",
                   help="delegate: the delegate's form comes back to you to confirm")


def check(args: argparse.Namespace) -> str | None:
    """A usage problem of these arguments, or None."""
    if args.action != "list" and not args.id:
        return f"tasks {args.action} needs a task id"
    if args.action in ("reassign", "delegate") and not args.to_user:
        return f"tasks {args.action} needs --to USER"
    if args.action == "comment" and not (args.text or "").strip():
        return "tasks comment needs the comment's text"
    if args.action == "complete" and not (args.field or args.data):
        return "tasks complete needs the form: --field NAME=VALUE ... and/or --data JSON"
    return None


def _list_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = page_params(args) | {"scope": args.scope}
    for name in ("state", "saga_type", "saga_id", "min_priority", "assignee",
                 "candidate_group"):
        if getattr(args, name) is not None:
            params[name] = getattr(args, name)
    if args.title_text:
        params["text"] = args.title_text
    if args.any_state:
        params["any_state"] = "true"
    if args.overdue:
        params["overdue"] = "true"
    return params


def form_data(schema: Mapping[str, Any] | None, fields: list[str], data: str | None
              ) -> dict[str, Any]:
    """The form from ``--data`` and ``--field`` pairs, each value read as its field's type."""
    form: dict[str, Any] = {}
    if data:
        try:
            parsed = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--data is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ValueError("--data must be a JSON object")
        form.update(parsed)
    properties = (schema or {}).get("properties") or {}
    for pair in fields:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--field {pair!r} is not NAME=VALUE")
        form[name] = _typed(properties.get(name) or {}, value)
    return form


def _typed(prop: Mapping[str, Any], value: str) -> Any:
    types = {prop.get("type")} | {o.get("type") for o in prop.get("anyOf") or ()}
    if types & _JSON_TYPES and "string" not in types:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # the server says what is wrong with it
    return value


def run(call: Call, client: httpx.Client, args: argparse.Namespace) -> Any:
    a = args.action
    if a == "list":
        return call(client, "GET", "/tasks", params=_list_params(args))
    path = f"/tasks/{args.id}"
    if a == "show":
        return call(client, "GET", path)
    if a in ("claim", "unclaim"):
        return call(client, "POST", f"{path}/{a}")
    if a == "complete":
        schema = call(client, "GET", path).get("form_schema")
        body = {"data": form_data(schema, args.field, args.data)}
        return call(client, "POST", f"{path}/complete", json=body)
    if a == "reassign":
        return call(client, "POST", f"{path}/reassign", json={"to_user": args.to_user})
    if a == "delegate":
        return call(client, "POST", f"{path}/delegate",
                    json={"to_user": args.to_user, "return_to_owner": args.return_to_owner})
    return call(client, "POST", f"{path}/comments", json={"text": args.text})


def render_task(task: Mapping[str, Any]) -> str:
    """One task as a sheet: what, whose, when, its form's fields and its comments."""
    people = [*task["candidate_users"], *(f"group {g}" for g in task["candidate_groups"])]
    lines = [f"task      {task['id']}",
             f"title     {task['title']}",
             f"saga      {task['saga_type']} {task['saga_id']} at {task['node']}",
             f"state     {task['state']}" + (" (OVERDUE)" if task.get("overdue") else ""),
             f"priority  {task['priority']}   due {task['due_at'] or '-'}",
             f"offered   {', '.join(people) or '-'}",
             f"assignee  {task['assignee'] or '-'}"
             + (f" (delegated by {task['owner']})" if task.get("owner") else "")]
    if task.get("excluded_users"):
        lines.append(f"excluded  {', '.join(task['excluded_users'])} (four eyes)")
    if task.get("description"):
        lines.append(f"about     {task['description']}")
    if task.get("outcome"):
        lines.append(f"outcome   {task['outcome']} by {task['completed_by']}")
    out = "\n".join(lines) + "\n"
    schema = task.get("form_schema") or {}
    required = set(schema.get("required") or ())
    fields = [{"field": name, "type": _type_of(prop), "required": name in required,
               "choices": ", ".join(map(str, prop.get("enum") or ())) or None}
              for name, prop in (schema.get("properties") or {}).items()]
    if fields:
        out += "form:\n" + table(fields, ["field", "type", "required", "choices"])
    if task.get("comments"):
        out += "comments:\n" + table(task["comments"], ["at", "by", "text"])
    return out


def _type_of(prop: Mapping[str, Any]) -> str:
    types = [prop.get("type")] + [o.get("type") for o in prop.get("anyOf") or ()]
    return "/".join(t for t in types if t) or "any"


def render_tasks(args: argparse.Namespace, data: Any, out: TextIO) -> None:
    if args.action == "list":
        out.write(table(data["items"], _COLUMNS))
        write_next_page(data, out)
    elif args.action == "show":
        out.write(render_task(data))
    else:
        task = data["task"]
        holder = f", held by {task['assignee']}" if task["assignee"] else ""
        out.write(f"task {task['id']}: {args.action} done; {task['state']}{holder}; "
                  f"saga {task['saga_id']} {data['saga_status']}\n")
