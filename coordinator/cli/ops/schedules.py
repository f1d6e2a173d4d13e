"""``saga schedules ...``: create, list, show, update, pause, resume, trigger, backfill,
preview and delete schedules over the operator API."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import httpx

from coordinator.cli.ops.render import page_params, table, write_next_page

__all__ = ["add_schedule_commands", "render_schedules"]

Call = Callable[..., Any]
_OVERLAPS = ("skip", "buffer_one", "buffer_all", "cancel_other", "allow_all")
_ACTIONS = ("list", "show", "create", "update", "delete", "pause", "resume", "trigger",
            "backfill", "preview", "runs")


def _duration(text: str) -> float | str:
    """Seconds (``90``) or ISO 8601 (``PT1H30M``), as pydantic reads a timedelta."""
    try:
        return float(text)
    except ValueError:
        return text


def _definition(args: argparse.Namespace) -> dict[str, Any]:
    if args.body:
        body: dict[str, Any] = json.loads(Path(args.body).read_text(encoding="utf-8"))
        body.setdefault("id", args.id)
        return body
    if not args.type:
        raise ValueError("--type is needed (or --body FILE with the whole definition)")
    spec: dict[str, Any] = {"timezone": args.timezone}
    if args.cron:
        spec["cron"] = args.cron
    if args.every:
        spec["intervals"] = [{"every": _duration(args.every),
                              "offset": _duration(args.offset or "0")}]
    if args.at:
        spec["at"] = args.at
    if args.start_at:
        spec["start_at"] = args.start_at
    if args.end_at:
        spec["end_at"] = args.end_at
    if args.country or args.closed_date or args.on_closed or args.weekend is not None:
        calendar: dict[str, Any] = {"on_closed": args.on_closed or "skip"}
        if args.country:
            calendar["country"] = args.country
        if args.subdivision:
            calendar["subdivision"] = args.subdivision
        if args.closed_date:
            calendar["closed_dates"] = args.closed_date
        if args.weekend is not None:
            calendar["weekend"] = [int(d) for d in args.weekend.split(",") if d.strip()]
        spec["calendar"] = calendar
    body = {"id": args.id, "saga_type": args.type, "input": args.input or {}, "spec": spec,
            "overlap": args.overlap, "catchup_window": _duration(args.catchup_window),
            "jitter": _duration(args.jitter), "paused": args.paused, "note": args.note}
    if args.version:
        body["saga_version"] = args.version
    if args.fire_time_field:
        body["fire_time_field"] = args.fire_time_field
    return body


def run(call: Call, client: httpx.Client, args: argparse.Namespace) -> Any:
    a, base = args.action, "/schedules"
    if a == "list":
        params = page_params(args)
        if args.type:
            params["type"] = args.type
        return call(client, "GET", base, params=params)
    path = f"{base}/{args.id}"
    if a == "show":
        return call(client, "GET", path, params={"runs": args.limit})
    if a in ("create", "update"):
        body = _definition(args)
        if a == "create":
            return call(client, "POST", base, json=body)
        return call(client, "PUT", path, json=body)
    if a == "delete":
        call(client, "DELETE", path)
        return {"deleted": args.id}
    if a in ("pause", "resume", "trigger"):
        return call(client, "POST", f"{path}/{a}", json={"reason": args.reason})
    if a == "backfill":
        return call(client, "POST", f"{path}/backfill",
                    json={"start": args.start, "end": args.end, "reason": args.reason})
    if a == "preview":
        return call(client, "GET", f"{path}/preview", params={"count": args.count})
    return call(client, "GET", f"{path}/runs", params=page_params(args))


def add_schedule_commands(p: argparse.ArgumentParser) -> None:
    """The ``schedules`` command's arguments: an action, then its options."""
    p.add_argument("action", choices=_ACTIONS)
    p.add_argument("id", nargs="?", help="the schedule id (every action but list)")
    p.add_argument("--type", help="saga type (list: filter; create/update: what to start)")
    p.add_argument("--version", type=int, help="pin the saga version")
    p.add_argument("--input", type=json.loads, help="the saga input (JSON object)")
    p.add_argument("--body", help="a JSON file holding the whole definition")
    p.add_argument("--cron", action="append", help="cron expression (repeatable)")
    p.add_argument("--every", help="interval: seconds or ISO 8601 (PT1H)")
    p.add_argument("--offset", help="interval offset from the epoch")
    p.add_argument("--at", action="append", help="one-shot time, ISO 8601 with offset")
    p.add_argument("--timezone", default="UTC", help="IANA zone of the cron fields")
    p.add_argument("--start-at", dest="start_at")
    p.add_argument("--end-at", dest="end_at")
    p.add_argument("--country", help="business calendar: public holidays of this country")
    p.add_argument("--subdivision", help="... and subdivision (state, region)")
    p.add_argument("--closed-date", dest="closed_date", action="append",
                   help="a custom closed date YYYY-MM-DD (repeatable)")
    p.add_argument("--weekend", help="closed weekdays, 0=Monday (default 5,6)")
    p.add_argument("--on-closed", dest="on_closed", choices=["skip", "shift"])
    p.add_argument("--overlap", choices=_OVERLAPS, default="skip")
    p.add_argument("--catchup-window", dest="catchup_window", default="60")
    p.add_argument("--jitter", default="0")
    p.add_argument("--fire-time-field", dest="fire_time_field",
                   help="input field that receives the fire time")
    p.add_argument("--paused", action="store_true", help="create it paused")
    p.add_argument("--note", default="")
    p.add_argument("--reason", "-r", help="why (pause, resume, trigger, backfill)")
    p.add_argument("--start", help="backfill: first time (ISO 8601)")
    p.add_argument("--end", help="backfill: last time (ISO 8601)")
    p.add_argument("--count", type=int, default=10, help="preview: how many times")
    p.add_argument("--limit", type=int, default=20,
                   help="show/runs: how many runs; list/runs: page size")
    p.add_argument("--cursor", help="list/runs: the next_cursor of the previous page")


def check(args: argparse.Namespace) -> str | None:
    """A usage problem of these arguments, or None."""
    if args.action != "list" and not args.id:
        return f"schedules {args.action} needs a schedule id"
    if args.action in ("pause", "resume", "trigger", "backfill") and not args.reason:
        return f"schedules {args.action} needs --reason"
    if args.action == "backfill" and not (args.start and args.end):
        return "schedules backfill needs --start and --end"
    return None


_COLUMNS = ["id", "saga_type", "overlap", "paused", "next_fire_at", "fired_count",
            "skipped_count", "missed_count"]
_RUN_COLUMNS = ["nominal_at", "outcome", "saga_id", "saga_status", "lag_seconds", "reason"]


def _row(s: dict[str, Any]) -> dict[str, Any]:
    d = s["definition"]
    return {**s, "id": d["id"], "saga_type": d["saga_type"], "overlap": d["overlap"],
            "paused": d["paused"]}


def render_schedules(args: argparse.Namespace, data: Any, out: TextIO) -> None:
    a = args.action
    if a == "list":
        out.write(table([_row(s) for s in data["items"]], _COLUMNS))
        write_next_page(data, out)
    elif a in ("show", "create", "update", "pause", "resume"):
        out.write(table([_row(data)], _COLUMNS))
        out.write(f"spec: {json.dumps(data['definition']['spec'])}\n")
        if data.get("upcoming"):
            out.write("next: " + ", ".join(data["upcoming"]) + "\n")
        if data.get("recent_runs"):
            out.write(table(data["recent_runs"], _RUN_COLUMNS))
    elif a == "runs":
        out.write(table(data["items"], _RUN_COLUMNS))
        write_next_page(data, out)
    elif a == "trigger":
        out.write(table([data], _RUN_COLUMNS))
    elif a == "preview":
        out.writelines(f"{t}\n" for t in data["times"])
    else:
        out.write(json.dumps(data) + "\n")
