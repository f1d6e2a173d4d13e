"""The UI's schedules pages: the list (next fire time, counts), one schedule (its last runs
with their outcomes, the next fire times) and its pause, resume and trigger buttons.

Reads and changes go through the same repository and firer as the JSON API; changes check
the CSRF token and the operator role and are audited like the API's.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response

from coordinator.api.auth import Role
from coordinator.schedules import ScheduleConflict, ScheduleFirer, ScheduleNotFound
from coordinator.schedules import repository as repo
from coordinator.ui.session import check_csrf
from coordinator.ui.web import UiError, api_context, form_of, page, redirect, session_of, signed_in

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter()
_ACTIONS = ("pause", "resume", "trigger")


@router.get("/schedules", include_in_schema=False)
async def schedules(request: Request) -> Response:
    me = signed_in(request)
    async with api_context(request).store.pool.acquire() as conn:
        found = await repo.list_all(conn)
    return page(request, "schedules.html", me=me, schedules=found)


@router.get("/schedules/{schedule_id}", include_in_schema=False)
async def schedule(request: Request, schedule_id: str) -> Response:
    me = signed_in(request)
    async with api_context(request).store.pool.acquire() as conn:
        try:
            state = repo.state_of(await repo.get(conn, schedule_id))
        except ScheduleNotFound:
            raise UiError(404, f"no schedule {schedule_id!r}") from None
        runs = await repo.list_runs(conn, schedule_id, limit=50)
    nxt = state.next_fire_at
    upcoming = [] if nxt is None else [nxt, *state.definition.spec.preview(nxt, 4)]
    return page(request, "schedule.html", me=me, s=state, runs=runs, upcoming=upcoming,
                Role=Role, actions=_ACTIONS)


@router.post("/schedules/{schedule_id}/{action}", include_in_schema=False)
async def act(request: Request, schedule_id: str, action: str) -> Response:
    form = await form_of(request)
    check_csrf(request, session_of(request), form)
    who = signed_in(request, Role.OPERATOR)
    if action not in _ACTIONS:
        raise UiError(404, f"unknown schedule action {action[:40]!r}")
    reason = form.get("reason", "").strip()
    if not reason or len(reason) > 2000 or "\x00" in reason:
        raise UiError(422, "a reason (at most 2000 characters) is required")
    ctx = api_context(request)
    session = session_of(request)
    try:
        if action == "trigger":
            run = await ScheduleFirer(ctx.store, actor=f"operator:{who.name}").trigger(
                schedule_id, actor=who.name, now=ctx.now())
            session.set_flash("ok", f"run started by {who.name}: saga {run['saga_id']}")
        else:
            async with ctx.store.pool.acquire() as conn, conn.transaction():
                await repo.set_paused(conn, schedule_id, action == "pause", now=ctx.now(),
                                      actor=who.name, note=f"{action} by {who.name}: {reason}")
            session.set_flash("ok", f"schedule {action}d by {who.name}.")
    except ScheduleNotFound:
        raise UiError(404, f"no schedule {schedule_id!r}") from None
    except ScheduleConflict as exc:
        session.set_flash("error", f"{action} refused: {exc}")
    audit.info("schedule %s id=%s by=%s reason=%r (ui)", action, schedule_id, who.name, reason)
    return redirect(request, f"/ui/schedules/{schedule_id}")
