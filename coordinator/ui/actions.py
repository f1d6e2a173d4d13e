"""The UI's POST handlers: sign-in and sign-out, repairs, bulk repair jobs, dead letters.

Each one checks the CSRF token and the role on the server (the hidden buttons are only a
courtesy), calls the same function as the JSON API, records who did it through that path's
audit log, then redirects (post/redirect/get) to a page that shows the result.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from coordinator.api import routes_dead_letters as letters
from coordinator.api.auth import Authenticator, Principal, Role, client_address
from coordinator.api.errors import ApiError
from coordinator.api.jobs import JobTooLarge, create_job
from coordinator.api.models import BulkRepairRequest, SagaFilter
from coordinator.api.queries import matching_ids
from coordinator.api.repairs import RepairOptions, apply_repair
from coordinator.engine import InvalidTransition, RepairVerb, Status
from coordinator.store import SagaNotFound
from coordinator.ui.queries import BULK_LIMIT
from coordinator.ui.session import check_csrf
from coordinator.ui.web import (
    UiError,
    api_context,
    form_of,
    page,
    redirect,
    safe_next,
    session_of,
    signed_in,
    ui_state,
)

__all__ = ["router"]

audit = logging.getLogger("coordinator.api.audit")
router = APIRouter()

async def _checked_form(request: Request) -> dict[str, str]:
    form = await form_of(request)
    check_csrf(request, session_of(request), form)
    return form


def _reason(form: dict[str, str]) -> str:
    reason = form.get("reason", "").strip()
    if not reason:
        raise UiError(422, "a reason is required: it is recorded in the saga's history")
    if len(reason) > 2000 or "\x00" in reason:
        raise UiError(422, "the reason must be at most 2000 characters, without NUL")
    return reason


@router.post("/login", include_in_schema=False)
async def login(request: Request) -> Response:
    """Check a token or a JWT once, then keep the session on the server (the cookie gets its
    id only)."""
    form = await _checked_form(request)
    auth: Authenticator = request.app.state.auth
    try:
        checked = await auth.authenticate(form.get("token", "").strip(),
                                          client=client_address(request))
    except ApiError as exc:
        audit.info("ui sign-in refused (%s)", exc.code)
        response = page(request, "login.html", status=exc.status,
                        next=safe_next(form.get("next")),
                        error=exc.message[:1].upper() + exc.message[1:] + ".")
        response.headers.update(exc.headers or {})
        return response
    ctx = api_context(request)
    session = session_of(request)
    sessions = ui_state(request).sessions
    if session.sid is not None:
        await sessions.delete(ctx.store.pool, session.sid)
    sid = await sessions.create(ctx.store.pool, checked.principal, checked.key_id,
                                now=ctx.now(), expires_at=checked.expires_at)
    session.sign_in(checked.principal, sid)
    audit.info("ui sign-in by=%s role=%s", checked.principal.name, checked.principal.role.value)
    return redirect(request, safe_next(form.get("next")))


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    """End the session on the server, so a copy of the cookie no longer signs anyone in."""
    await _checked_form(request)
    session = session_of(request)
    if session.principal is not None:
        audit.info("ui sign-out by=%s", session.principal.name)
    if session.sid is not None:
        await ui_state(request).sessions.delete(api_context(request).store.pool, session.sid)
    session.sign_out()
    session.set_flash("ok", "Signed out.")
    return redirect(request, "/ui/login")


def _options(verb: RepairVerb, form: dict[str, str]) -> RepairOptions:
    step = form.get("step", "").strip() or None
    status = form.get("status", "").strip() or None
    if verb is RepairVerb.RESOLVE and status not in (None, "completed", "compensated"):
        raise UiError(422, "resolve closes a saga as completed or compensated")
    return RepairOptions(step=step, status=status)


def _verb(form: dict[str, str]) -> RepairVerb:
    try:
        return RepairVerb(form.get("verb", ""))
    except ValueError:
        raise UiError(422, f"unknown repair verb {form.get('verb', '')[:40]!r}") from None


@router.post("/sagas/{saga_id}/repair", include_in_schema=False)
async def repair(request: Request, saga_id: UUID) -> Response:
    form = await _checked_form(request)
    who = signed_in(request, Role.OPERATOR)
    verb, reason = _verb(form), _reason(form)
    session = session_of(request)
    try:
        result = await apply_repair(api_context(request).store, saga_id, verb,
                                    principal=who.name, reason=reason,
                                    options=_options(verb, form))
    except SagaNotFound:
        raise UiError(404, f"no saga with id {saga_id}") from None
    except InvalidTransition as exc:
        session.set_flash("error", f"{verb.value} refused: {exc}")
    else:
        session.set_flash("ok", f"{verb.value} applied by {who.name}: the saga is now "
                                f"{result.status}.")
    return redirect(request, f"/ui/sagas/{saga_id}")


def _bulk_filter(form: dict[str, str]) -> SagaFilter:
    fields: dict[str, Any] = {"status": Status.DEAD}
    for name, key in (("saga_type", "type"), ("current_step", "current_step")):
        if form.get(key, "").strip():
            fields[name] = form[key].strip()
    try:
        return SagaFilter(**fields)
    except ValidationError:
        raise UiError(422, "bad filter for the bulk repair") from None


@router.post("/repairs", include_in_schema=False)
async def bulk_repair(request: Request) -> Response:
    """A bulk job over the dead sagas the filter matches; the operator types the count."""
    form = await _checked_form(request)
    who = signed_in(request, Role.OPERATOR)
    verb, reason = _verb(form), _reason(form)
    f = _bulk_filter(form)
    ctx = api_context(request)
    back = "/ui/dead?" + "&".join(f"{k}={form[k]}" for k in ("type", "current_step")
                                  if form.get(k))
    session = session_of(request)
    async with ctx.store.pool.acquire() as conn:
        matched = len(await matching_ids(conn, f, now=ctx.now(), stuck_ids=(),
                                         limit=BULK_LIMIT + 1))
        if form.get("confirm", "").strip() != str(matched):
            session.set_flash("error", f"Not started: the filter now matches {matched} dead "
                                       "sagas; type that number to confirm.")
            return redirect(request, back)
        body = BulkRepairRequest(verb=verb, reason=reason, filter=f, max_sagas=BULK_LIMIT,
                                 status="completed" if verb is RepairVerb.RESOLVE else None)
        try:
            job_id = await create_job(conn, body, actor=who.name, now=ctx.now(), stuck_ids=())
        except JobTooLarge as exc:
            session.set_flash("error", str(exc))
            return redirect(request, back)
    audit.info("bulk %s job=%s by=%s sagas=%d reason=%r", verb.value, job_id, who.name,
               matched, reason)
    ctx.wake_jobs()
    session.set_flash("ok", f"Bulk {verb.value} of {matched} sagas started.")
    return redirect(request, f"/ui/jobs/{job_id}")


_LETTER_ACTIONS = {
    ("coordinator", "requeue"): (Role.OPERATOR, letters.requeue_dead_letter),
    ("coordinator", "discard"): (Role.ADMIN, letters.discard_dead_letter),
    ("relay", "requeue"): (Role.OPERATOR, letters.requeue_outbox_dead_letter),
    ("relay", "discard"): (Role.ADMIN, letters.discard_outbox_dead_letter),
}


@router.post("/dead-letters/{kind}/{letter_id}/{action}", include_in_schema=False)
async def dead_letter_action(request: Request, kind: str, letter_id: int,
                             action: str) -> Response:
    form = await _checked_form(request)
    if (kind, action) not in _LETTER_ACTIONS:
        raise UiError(404, "no such dead-letter action")
    role, handler = _LETTER_ACTIONS[(kind, action)]
    who: Principal = signed_in(request, role)
    if form.get("confirm") != "yes":
        raise UiError(422, "confirm the action")
    session = session_of(request)
    try:
        done = await handler(letter_id, api_context(request), who)
    except ApiError as exc:
        session.set_flash("error", f"{action} of dead letter {letter_id} refused: "
                                   f"{exc.message}")
    else:
        session.set_flash("ok", f"Dead letter {letter_id} {done.action}: {done.detail}.")
    return redirect(request, "/ui/dead-letters")
