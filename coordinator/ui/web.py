"""What the UI's pages share: the templates, the session, who is signed in, rendering."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from coordinator.api.auth import Authenticator, Principal, Role
from coordinator.api.deps import Context
from coordinator.ui.session import Session, SessionCodec
from coordinator.ui.session_store import SessionStore
from coordinator.ui.settings import UiSettings

__all__ = ["SignInNeeded", "UiError", "UiState", "form_of", "page", "redirect",
           "resolve_session", "safe_next", "signed_in"]

HERE = Path(__file__).parent
#: Bodies of the UI's forms are small; refuse anything bigger before parsing.
MAX_FORM_BYTES = 64 * 1024
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class UiError(Exception):
    """Rendered as an HTML error page with this status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SignInNeeded(Exception):
    """No session: the page redirects to the sign-in form."""


def _ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "—"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if abs(seconds) >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _when(value: datetime | str | None) -> str:
    """A time in UTC, saying so (an ISO string from a snapshot's JSON too)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    t.env.filters.update(ago=_ago, when=_when, pretty=_pretty, urlq=lambda v: quote(str(v)))
    t.env.globals["Role"] = Role
    return t


#: How long the overview reuses its count of stuck sagas (a scan of every saga in flight).
STUCK_COUNT_TTL = timedelta(seconds=10)


@dataclass
class UiState:
    settings: UiSettings
    codec: SessionCodec
    sessions: SessionStore
    templates: Jinja2Templates
    _stuck: tuple[datetime, int] | None = None

    async def stuck_count(self, scan: Callable[[], Awaitable[Collection[Any]]],
                          now: datetime) -> int:
        """The number of stuck sagas, scanned at most once per ``STUCK_COUNT_TTL``."""
        if self._stuck is None or now - self._stuck[0] > STUCK_COUNT_TTL:
            self._stuck = (now, len(await scan()))
        return self._stuck[1]

    @classmethod
    def build(cls, settings: UiSettings) -> UiState:
        sessions = SessionStore(idle_timeout=settings.session_idle_timeout,
                                max_age=settings.session_max_age)
        return cls(settings, SessionCodec(settings), sessions, _templates())


def ui_state(request: Request) -> UiState:
    state: UiState = request.app.state.ui
    return state


def api_context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


def session_of(request: Request) -> Session:
    """The request's session, loaded once (pages write it back when it changed)."""
    cached = getattr(request.state, "ui_session", None)
    if isinstance(cached, Session):
        return cached
    session = ui_state(request).codec.load(request)
    request.state.ui_session = session
    return session


async def resolve_session(request: Request) -> None:
    """Who the session's server-side record says signed in, if it is still live and its
    credential still configured (a dependency of every UI route); else the session ends."""
    session = session_of(request)
    if session.sid is None:
        return
    ctx = api_context(request)
    sessions = ui_state(request).sessions
    record = await sessions.find(ctx.store.pool, session.sid, now=ctx.now())
    auth: Authenticator = request.app.state.auth
    principal = (None if record is None
                 else auth.still_valid(record.credential, record.principal))
    if principal is None:
        if record is not None:
            await sessions.delete(ctx.store.pool, session.sid)
        session.sign_out()
        return
    session.principal = principal


def signed_in(request: Request, role: Role = Role.VIEWER) -> Principal:
    """The signed-in principal, who must have ``role`` (the server-side gate of every action)."""
    principal = session_of(request).principal
    if principal is None:
        raise SignInNeeded
    if not principal.role.allows(role):
        raise UiError(403, f"{principal.name} has role {principal.role.value}; this needs "
                           f"{role.value}.")
    return principal


def finish(request: Request, response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Cache-Control", "no-store")
    ui_state(request).codec.save(session_of(request), request, response)
    return response


def page(request: Request, template: str, status: int = 200, **values: Any) -> Response:
    session = session_of(request)
    if "flash" not in values:
        values["flash"] = session.pop_flash()
    response = ui_state(request).templates.TemplateResponse(
        request, template, {"me": session.principal, "csrf": session.csrf,
                            "path": request.url.path,
                            "open_tasks": getattr(request.state, "open_tasks", None),
                            **values}, status_code=status)
    return finish(request, response)


def redirect(request: Request, to: str) -> Response:
    return finish(request, RedirectResponse(to, status_code=303))


async def form_of(request: Request) -> dict[str, str]:
    """The URL-encoded form of a POST (last value wins); too big a body is a 413."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise UiError(413, "the form is too large")
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        raise UiError(400, "the form is not UTF-8") from None


def safe_next(target: str | None) -> str:
    """Only a path inside the UI (no open redirect to another site)."""
    if target and target.startswith("/ui/") and not target.startswith("//"):
        return target
    return "/ui/"
