"""Plain-text tables and sheets for the ``saga`` CLI."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

__all__ = ["page_params", "render_dead", "render_history", "render_job", "render_saga",
           "render_versions", "table", "write_next_page"]


#: Columns that say why (a reason, an error, an outcome's message): never cut short.
WHY_COLUMNS = frozenset({"reason", "last_error", "message", "what"})


def _cell(value: Any, width: int | None = 60) -> str:
    text = "" if value is None else value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", " ")
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def _attempts(value: Any) -> str:
    """``{"try": 2, "confirm": 1}`` as ``try 2, confirm 1``."""
    if isinstance(value, Mapping):
        return ", ".join(f"{phase} {n}" for phase, n in value.items())
    return _cell(value)


def page_params(args: Any) -> dict[str, Any]:
    """``limit`` and ``cursor`` of a list command (every API list pages the same way)."""
    params: dict[str, Any] = {"limit": args.limit}
    if args.cursor:
        params["cursor"] = args.cursor
    return params


def next_page_line(page: Mapping[str, Any]) -> str:
    return f"next page: --cursor {page['next_cursor']}\n" if page.get("next_cursor") else ""


def write_next_page(page: Mapping[str, Any], out: TextIO) -> None:
    out.write(next_page_line(page))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(none)\n"
    cells = [[_cell(row.get(c), None if c in WHY_COLUMNS else 60) for c in columns]
             for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def render_saga(data: Mapping[str, Any]) -> str:
    head = [f"saga     {data['saga_id']}",
            f"type     {data['saga_type']} v{data['version']}",
            f"status   {data['status']} ({data['state']})"]
    reason = data.get("reason")
    if reason and reason not in (data.get("dead_reason"), data.get("rollback_reason")):
        head.append(f"reason   {reason}")
    if data.get("rollback_reason"):
        head.append(f"rollback {data['rollback_reason']}")
    if data.get("dead_step"):
        head.append(f"dead at  {data['dead_step']}: {data.get('dead_reason') or reason}")
    late = data.get("late_ok")
    if late:
        head.append(f"late ok  {late['step']} {late['phase']} attempt {late['attempt']} at "
                    f"{late['at']}: a retry will complete it")
    repaired = data.get("repaired")
    if repaired:
        head.append(f"repaired {repaired['verb']} by {repaired['actor']} at {repaired['at']} "
                    f"({repaired['reason']}); it was dead at {repaired['dead_step']}: "
                    f"{repaired['dead_reason']}")
    if len(data.get("active_steps") or ()) > 1:  # parallel branches, for-each items
        head.append(f"active   {', '.join(data['active_steps'])} (repair verbs need --step)")
    if data.get("parent_id"):
        head.append(f"parent   {data['parent_id']} (node {data.get('parent_node')})")
    for child in data.get("children") or ():
        head.append(f"child    {child['saga_id']} {child['saga_type']} {child['status']} "
                    f"(node {child['node']})")
    head.append(f"input    {_cell(data.get('input'), 200)}")
    search = data.get("search_attributes") or {}
    if search:
        head.append("search   " + ", ".join(f"{k}={_cell(v, 60)}" for k, v in search.items()))
    steps = [{"step": s["key"], "phase": s["phase"], "attempts": _attempts(s["attempts"]),
              "last_error": (s["last_error"] or {}).get("message"), "result": s["result"]}
             for s in data.get("steps", [])]
    return "\n".join(head) + "\n\n" + table(steps, ["step", "phase", "attempts", "last_error",
                                                    "result"])


def render_history(data: Mapping[str, Any]) -> str:
    rows = [{"seq": e["seq"], "at": e["recorded_at"], "type": e["type"], "actor": e["actor"],
             "reason": e.get("reason"), "what": "; ".join(e.get("annotation") or [])
             if isinstance(e.get("annotation"), list) else e.get("annotation")}
            for e in data["entries"]]
    return table(rows, ["seq", "at", "type", "actor", "reason", "what"])


def render_dead(data: Mapping[str, Any]) -> str:
    rows = [{**d, "last_error": (d.get("last_error") or {}).get("message")}
            for d in data["items"]]
    return (table(rows, ["saga_id", "saga_type", "step", "attempts", "reason", "last_error"])
            + next_page_line(data))


def render_job(data: Mapping[str, Any]) -> str:
    verb = data.get("verb", "verify")  # verify jobs have no repair verb
    head = (f"job      {data['job_id']}\nverb     {verb} by {data['actor']}\n"
            f"status   {data['status']} ({data['total']} sagas: "
            f"{', '.join(f'{k} {v}' for k, v in sorted(data['counts'].items()))})\n\n")
    return head + table(data["items"], ["saga_id", "outcome", "status", "message"])


def render_versions(data: Mapping[str, Any]) -> str:
    """The drain report: one row per version, then the diff if one was asked for."""
    rows = [{**v, **{s: v["by_status"].get(s, 0) for s in ("running", "compensating", "dead")},
             "expected_last_finish": v["expected_last_finish"] or
             ("unknown" if v["unbounded"] else "")} for v in data["versions"]]
    text = f"saga type {data['saga_type']}\n" + table(rows, [
        "version", "registered", "latest", "running", "compensating", "dead",
        "oldest_live_at", "oldest_live_id", "unbounded", "expected_last_finish"])
    for v in data["versions"]:
        for change, counts in sorted(v.get("guards", {}).items()):
            retire = " (can be retired)" if not counts["old"] and not counts["undecided"] else ""
            text += (f"v{v['version']} guard {change}: old {counts['old']}, new {counts['new']},"
                     f" undecided {counts['undecided']}{retire}\n")
    diff = data.get("diff")
    if diff:
        text += f"v{diff['from_version']} -> v{diff['to_version']}:\n"
        for key in ("steps_added", "steps_removed", "steps_changed", "states_added",
                    "states_removed", "transitions_added", "transitions_removed"):
            text += "".join(f"  {key.replace('_', ' ')}: {item}\n" for item in diff[key])
        if diff["input_schema_changed"]:
            text += "  input schema changed\n"
    return text
