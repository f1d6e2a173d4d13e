"""``saga``: list, show, repair, bulk-repair and verify sagas, and act on human tasks, over
the operator API.

``--url`` / ``SAGAFLOW_API_URL`` and ``--token`` / ``SAGAFLOW_API_TOKEN`` say where and who.
Output is a readable table by default and the API's JSON with ``--json``. Exit codes: 0 ok,
1 the API refused (4xx), 2 usage or connection error, 3 server error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO
from urllib.parse import quote

import httpx

from coordinator.cli.ops import definitions, schedules, tasks, updates
from coordinator.cli.ops.http import CliError, find_saga
from coordinator.cli.ops.http import call as _call
from coordinator.cli.ops.render import (
    page_params,
    render_dead,
    render_history,
    render_job,
    render_saga,
    render_versions,
    table,
    write_next_page,
)
from participant_sdk.version import version_line

__all__ = ["main"]

Handler = Callable[[httpx.Client, argparse.Namespace], Any]
_VERBS = ("retry", "skip", "compensate", "cancel", "resolve")
_SAGA_ARG = "saga id, its first hex digits, or its business key"


def _json_arg(text: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _filter_params(args: argparse.Namespace) -> dict[str, Any]:
    names = ("type", "version", "status", "current_step", "min_age_seconds",
             "max_age_seconds", "min_retries", "business_key")
    params = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if getattr(args, "stuck", False):
        params["stuck"] = "true"
    return params


def cmd_list(client: httpx.Client, args: argparse.Namespace) -> Any:
    params = _filter_params(args) | page_params(args) | {"sort": args.sort}
    if args.q is not None:
        params["q"] = args.q
    return _call(client, "GET", "/sagas", params=params)


def cmd_show(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/sagas/{find_saga(client, args.saga_id)}")


def cmd_history(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/sagas/{find_saga(client, args.saga_id)}/history")


def cmd_diagram(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/sagas/{find_saga(client, args.saga_id)}/diagram")


def cmd_dead(client: httpx.Client, args: argparse.Namespace) -> Any:
    params = page_params(args)
    if args.type:
        params["type"] = args.type
    return _call(client, "GET", "/dead-sagas", params=params)


def cmd_types(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", "/saga-types")


def cmd_versions(client: httpx.Client, args: argparse.Namespace) -> Any:
    params = {"diff_from": args.diff[0], "diff_to": args.diff[1]} if args.diff else {}
    return _call(client, "GET", f"/saga-types/{quote(args.type, safe='')}/versions",
                 params=params)


def cmd_migrate_dry_run(client: httpx.Client, args: argparse.Namespace) -> Any:
    body = {"saga_type": args.type, "from_version": args.from_version,
            "to_version": args.to_version, "limit": args.limit}
    return _call(client, "POST", "/migrations/dry-run", json=body)


def cmd_migrate(client: httpx.Client, args: argparse.Namespace) -> Any:
    body = {"saga_type": args.type, "from_version": args.from_version,
            "to_version": args.to_version, "reason": args.reason, "max_sagas": args.max_sagas}
    return _call(client, "POST", "/migrations", json=body)


def cmd_migration(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/migrations/{args.job_id}")


def _render_migration(data: dict[str, Any]) -> str:
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(data["counts"].items()))
    lines = [f"migration job {data['job_id']} {data['saga_type']} v{data['from_version']} -> "
             f"v{data['to_version']}: {data['status']}, {data['total']} sagas ({counts})\n"]
    lines.extend(f"  {i['saga_id']}: {i['outcome']}" + (f": {i['message']}" if i["message"]
                                                         else "") + "\n"
                 for i in data["items"] if i["outcome"] not in ("applied", "pending"))
    return "".join(lines)


def _render_dry_run(data: dict[str, Any]) -> str:
    lines = [f"{data['saga_type']} v{data['from_version']} -> v{data['to_version']} "
             f"({data['migration']}): {data['can_move']} of {data['total']} live sagas can "
             f"move, {data['cannot_move']} cannot\n"]
    for item in data["items"]:
        if not item["can_move"]:
            lines.append(f"  {item['saga_id']}: " + "; ".join(item["problems"]) + "\n")
    return "".join(lines)


def cmd_start(client: httpx.Client, args: argparse.Namespace) -> Any:
    body: dict[str, Any] = {"type": args.type, "input": args.input}
    if args.saga_id:
        body["saga_id"] = args.saga_id
    if args.version:
        body["version"] = args.version
    if args.start_at:
        body["start_at"] = args.start_at
    if args.delay is not None:
        body["delay_seconds"] = args.delay
    return _call(client, "POST", "/sagas", json=body)


def cmd_signal(client: httpx.Client, args: argparse.Namespace) -> Any:
    body: dict[str, Any] = {"payload": args.payload}
    if args.signal_id:
        body["signal_id"] = args.signal_id
    if args.start_type:
        body.update(type=args.start_type, saga_id=args.saga_id, input=args.start_input,
                    signal=args.name)
        return _call(client, "POST", "/signal-with-start", json=body)
    saga = find_saga(client, args.saga_id)
    return _call(client, "POST", f"/sagas/{saga}/signals/{args.name}", json=body)


def cmd_query(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/sagas/{find_saga(client, args.saga_id)}/queries/{args.name}")


def _repair_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"reason": args.reason}
    for name in ("step", "payload", "result"):
        value = getattr(args, name, None)
        if value is not None:
            body[name] = value
    final = getattr(args, "final_status", None) if args.command == "bulk" else \
        getattr(args, "status", None)
    if final is not None:
        body["status"] = final
    return body


def cmd_repair(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "POST", f"/sagas/{find_saga(client, args.saga_id)}/{args.command}",
                 json=_repair_body(args))


def cmd_bulk(client: httpx.Client, args: argparse.Namespace) -> Any:
    flt = _filter_params(args)
    if "type" in flt:
        flt["saga_type"] = flt.pop("type")
    if "stuck" in flt:
        flt["stuck"] = True
    body = _repair_body(args) | {"verb": args.verb, "filter": flt,
                                 "max_sagas": args.max_sagas}
    return _call(client, "POST", "/repairs", json=body)


def cmd_job(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/repairs/{args.job_id}")


def cmd_verify(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/sagas/{find_saga(client, args.saga_id)}/verify")


def cmd_bulk_verify(client: httpx.Client, args: argparse.Namespace) -> Any:
    flt = _filter_params(args)
    if "type" in flt:
        flt["saga_type"] = flt.pop("type")
    if "stuck" in flt:
        flt["stuck"] = True
    body = {"filter": flt, "max_sagas": args.max_sagas}
    if args.reason:
        body["reason"] = args.reason
    return _call(client, "POST", "/verifications", json=body)


def cmd_verify_job(client: httpx.Client, args: argparse.Namespace) -> Any:
    return _call(client, "GET", f"/verifications/{args.job_id}")


def cmd_letters(client: httpx.Client, args: argparse.Namespace) -> Any:
    base = "/outbox/dead-letters" if args.outbox else "/dead-letters"
    if args.action == "list":
        return _call(client, "GET", base, params=page_params(args))
    if args.id is None:
        raise CliError(f"dead-letters {args.action} needs an id", 2)
    if args.action == "show":
        return _call(client, "GET", f"{base}/{args.id}")
    if args.action == "requeue":
        return _call(client, "POST", f"{base}/{args.id}/requeue")
    return _call(client, "DELETE", f"{base}/{args.id}")


def _sub(commands: Any) -> Handler:
    """The handler of a command kept in its own module: its usage check, then its run."""
    def handler(client: httpx.Client, args: argparse.Namespace) -> Any:
        problem = commands.check(args)
        if problem is not None:
            raise CliError(problem, 2)
        try:
            return commands.run(_call, client, args)
        except (ValueError, OSError) as exc:
            raise CliError(str(exc), 2) from None
    return handler


def _render(args: argparse.Namespace, data: Any, out: TextIO) -> None:
    command = args.command
    if command == "schedules":
        schedules.render_schedules(args, data, out)
    elif command == "tasks":
        tasks.render_tasks(args, data, out)
    elif command == "definitions":
        definitions.render_definitions(args, data, out)
    elif command == "list":
        out.write(table(data["items"], ["saga_id", "business_key", "saga_type", "version",
                                        "status", "state", "retries", "stuck", "created_at"]))
        write_next_page(data, out)
    elif command in ("show", "start", *_VERBS):
        out.write(render_saga(data))
    elif command == "signal":
        what = "already applied (same signal id): nothing changed" if data["duplicate"] \
            else "accepted"
        started = "; saga started" if data.get("started") else ""
        out.write(f"signal {data['name']} ({data['signal_id']}) to saga {data['saga_id']}: "
                  f"{what}{started}\n")
    elif command == "query":
        out.write(json.dumps(data["result"], indent=2) + "\n")
    elif command == "update":
        updates.render_update(data, out)
    elif command == "history":
        out.write(render_history(data))
    elif command == "diagram":
        out.write(data["mermaid"])
    elif command == "dead":
        out.write(render_dead(data))
    elif command == "types":
        out.write(table(data, ["name", "version", "latest"]))
    elif command == "versions":
        out.write(render_versions(data))
    elif command == "migrate-dry-run":
        out.write(_render_dry_run(data))
    elif command in ("migrate", "migration"):
        out.write(_render_migration(data))
    elif command in ("bulk", "job", "bulk-verify", "verify-job"):
        out.write(render_job(data))
    elif command == "verify":
        verdict = "replays to its snapshot" if data["ok"] else "DIFFERS from its snapshot"
        out.write(f"saga {data['saga_id']} {verdict} ({data['replayed_events']} events "
                  f"from seq {data['from_seq']})\n")
        out.writelines(f"  {d}\n" for d in data["differences"])
    elif command == "dead-letters":
        if args.action == "list":
            out.write(table(data["items"], ["id", "source", "topic", "reason", "created_at"]
                            if not args.outbox else
                            ["id", "topic", "key", "error_class", "reason", "failed_at"]))
            write_next_page(data, out)
        else:
            out.write(json.dumps(data, indent=2) + "\n")


def _add_filter(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type", help="saga type")
    p.add_argument("--version", type=int, help="saga type version")
    p.add_argument("--status", choices=["running", "completed", "compensating", "compensated",
                                        "dead", "cancelled"], help="saga status")
    p.add_argument("--current-step", dest="current_step", help="the step a saga is at")
    p.add_argument("--min-age", dest="min_age_seconds", type=float, metavar="SECONDS",
                   help="started at least this long ago")
    p.add_argument("--max-age", dest="max_age_seconds", type=float, metavar="SECONDS",
                   help="started at most this long ago")
    p.add_argument("--stuck", action="store_true", help="only stuck sagas")
    p.add_argument("--min-retries", dest="min_retries", type=int,
                   help="some step retried at least this many times")
    p.add_argument("--business-key", dest="business_key",
                   help="the id the saga is known by (its class's business key)")


def _add_repair_options(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument("--reason", "-r", required=True, help="why (recorded in the history)")
    if verb in ("retry", "skip", "compensate", "bulk"):
        p.add_argument("--step", help="the step (default: the failed or stuck one)")
    if verb in ("retry", "compensate", "bulk"):
        p.add_argument("--payload", type=_json_arg, help="replacement command payload (JSON)")
    if verb in ("skip", "bulk"):
        p.add_argument("--result", type=_json_arg, help="the skipped step's result (JSON)")
    if verb == "resolve":
        p.add_argument("--status", choices=["completed", "compensated"], default="completed",
                       help="the final status")
    if verb == "bulk":
        p.add_argument("--final-status", dest="final_status",
                       choices=["completed", "compensated"], help="resolve: the final status")


def _global_flags(p: argparse.ArgumentParser, *, with_defaults: bool) -> None:
    """Where and how to call the API; accepted before or after the command."""
    def default(value: Any) -> Any:
        return value if with_defaults else argparse.SUPPRESS

    p.add_argument("--url", default=default(os.environ.get("SAGAFLOW_API_URL",
                                                           "http://127.0.0.1:8080")),
                   help="the operator API (SAGAFLOW_API_URL; default http://127.0.0.1:8080)")
    p.add_argument("--token", default=default(os.environ.get("SAGAFLOW_API_TOKEN")),
                   help="bearer token (SAGAFLOW_API_TOKEN)")
    p.add_argument("--json", action="store_true", default=default(False),
                   help="print the API's JSON instead of a table")
    p.add_argument("--timeout", type=float, default=default(30.0), metavar="SECONDS",
                   help="HTTP timeout (default 30)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="saga", description="Operate sagaflow sagas.")
    parser.add_argument("--version", action="version", version=version_line("saga"))
    _global_flags(parser, with_defaults=True)
    flags = argparse.ArgumentParser(add_help=False)
    _global_flags(flags, with_defaults=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[flags])
        p.set_defaults(fn=fn)
        return p

    p = add("list", cmd_list, "list sagas")
    _add_filter(p)
    p.add_argument("--where", "-w", dest="q", metavar="FILTER",
                   help="a filter over search attributes and built-in fields, e.g. "
                        "\"customer_id = 'c-42' and amount > 1000\" (docs/operating.md)")
    p.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    p.add_argument("--sort", default="-created_at",
                   help="field, '-' for descending (default -created_at)")
    p.add_argument("--cursor", help="the next_cursor of the previous page")
    for name, fn, text in (("show", cmd_show, "a saga's status and steps"),
                           ("history", cmd_history, "a saga's event history"),
                           ("diagram", cmd_diagram, "a saga's Mermaid diagram")):
        add(name, fn, text).add_argument("saga_id", help=_SAGA_ARG)
    p = add("dead", cmd_dead, "the dead-saga queue")
    p.add_argument("--type", help="saga type")
    p.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    p.add_argument("--cursor", help="the next_cursor of the previous page")
    add("types", cmd_types, "registered saga types")
    p = add("versions", cmd_versions,
            "drain report: sagas in flight per version of a type, and a diff of two versions")
    p.add_argument("type", help="saga type")
    p.add_argument("--diff", nargs=2, type=int, metavar=("FROM", "TO"),
                   help="also show what changed from version FROM to version TO")
    p = add("migrate-dry-run", cmd_migrate_dry_run,
            "which live sagas of a version could move to another version, and why not")
    p.add_argument("type", help="saga type")
    p.add_argument("from_version", type=int, help="the version the sagas run on")
    p.add_argument("to_version", type=int, help="the version that declares the migration")
    p.add_argument("--limit", type=int, default=1000, help="at most this many sagas")
    p = add("migrate", cmd_migrate, "move the live sagas of a version to another (a job)")
    p.add_argument("type", help="saga type")
    p.add_argument("from_version", type=int, help="the version the sagas run on")
    p.add_argument("to_version", type=int, help="the version that declares the migration")
    p.add_argument("--reason", "-r", required=True, help="why (recorded in each history)")
    p.add_argument("--max-sagas", dest="max_sagas", type=int, default=1000,
                   help="refuse when more sagas than this would move (default 1000)")
    add("migration", cmd_migration, "a migration job and its per-saga outcomes").add_argument(
        "job_id", help="the job id")
    p = add("start", cmd_start, "start a saga")
    p.add_argument("type", help="saga type")
    p.add_argument("input", type=_json_arg, help="the input (JSON object)")
    p.add_argument("--saga-id", dest="saga_id",
                   help="your own id: starting twice with it is idempotent")
    p.add_argument("--version", type=int, help="saga type version (default: the latest)")
    p.add_argument("--start-at", dest="start_at", metavar="TIME",
                   help="delayed start: ISO 8601 time with its offset (scheduled until then)")
    p.add_argument("--delay", type=float, metavar="SECONDS",
                   help="delayed start after this many seconds")
    p = add("signal", cmd_signal, "send a saga a signal (kept until a wait takes it)")
    p.add_argument("saga_id", help="saga id, or its first hex digits (the full id with "
                                   "--start)")
    p.add_argument("name", help="the signal's name")
    p.add_argument("--payload", type=_json_arg, default={}, help="the payload (JSON object)")
    p.add_argument("--signal-id", dest="signal_id",
                   help="your id for it: sending it again is applied once")
    p.add_argument("--start", dest="start_type", metavar="TYPE",
                   help="signal-with-start: start a saga of TYPE with this id if absent")
    p.add_argument("--input", dest="start_input", type=_json_arg, default={},
                   help="with --start: the saga's input (JSON object)")
    updates.add_update_command(add("update", updates.update_handler(_call, find_saga, CliError),
                                   "send a saga an update and wait for its answer"),
                               _json_arg, _SAGA_ARG)
    p = add("query", cmd_query, "answer a query declared on the saga's class")
    p.add_argument("saga_id", help=_SAGA_ARG)
    p.add_argument("name", help="the query's name")
    for verb in _VERBS:
        p = add(verb, cmd_repair, f"{verb} a dead or stuck saga")
        p.add_argument("saga_id", help=_SAGA_ARG)
        _add_repair_options(p, verb)
    p = add("bulk", cmd_bulk, "apply a repair verb to every matching saga (a durable job)")
    p.add_argument("verb", choices=_VERBS, help="the repair verb")
    _add_filter(p)
    _add_repair_options(p, "bulk")
    p.add_argument("--max-sagas", dest="max_sagas", type=int, default=1000,
                   help="refuse the job when more sagas match (default 1000)")
    add("job", cmd_job, "a bulk repair job's progress and results").add_argument("job_id")
    add("verify", cmd_verify, "replay a saga's history and compare it with its snapshot"
        ).add_argument("saga_id", help=_SAGA_ARG)
    p = add("bulk-verify", cmd_bulk_verify, "replay-verify every matching saga (a durable job)")
    _add_filter(p)
    p.add_argument("--reason", "-r", help="why (recorded with the job)")
    p.add_argument("--max-sagas", dest="max_sagas", type=int, default=1000)
    add("verify-job", cmd_verify_job, "a verify job's progress and results"
        ).add_argument("job_id")
    p = add("dead-letters", cmd_letters, "list, show, requeue or discard dead letters")
    p.add_argument("action", choices=["list", "show", "requeue", "discard"], help="what to do")
    p.add_argument("id", nargs="?", type=int, help="dead letter id (show, requeue, discard)")
    p.add_argument("--outbox", action="store_true", help="the outbox's dead letters")
    p.add_argument("--limit", type=int, default=100, help="list: page size (default 100)")
    p.add_argument("--cursor", help="list: the next_cursor of the previous page")
    schedules.add_schedule_commands(add("schedules", _sub(schedules), "recurring and delayed "
                                        "saga starts: list, create, pause, trigger, backfill..."))
    tasks.add_task_commands(add("tasks", _sub(tasks), "human tasks: list, show, claim, ..."))
    definitions.add_definition_commands(add("definitions", definitions.handler(
        _call, CliError), "sagas declared as data: upload (admin), list, show, diff"))
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         transport: httpx.BaseTransport | None = None) -> int:
    """Run the CLI; returns the exit code. ``transport`` lets tests bypass the network."""
    args = _parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        with httpx.Client(base_url=args.url, headers=headers, timeout=args.timeout,
                          transport=transport) as client:
            data = args.fn(client, args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    if args.json:
        stream.write(json.dumps(data, indent=2) + "\n")
    else:
        _render(args, data, stream)
    return 0
