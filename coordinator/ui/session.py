"""The UI's session cookie: a signed id of a server-side session, a CSRF token, a flash.

The browser never sees a token after sign-in: the form posts it once, the API checks it with
the same :class:`~coordinator.api.auth.Authenticator` as the Bearer API and keeps who signed in
on the server (:mod:`coordinator.ui.session_store`); the cookie, signed with
:mod:`itsdangerous`, holds only a random session id, so sign-out, a removed token and the idle
timeout end it at once. The cookie is HttpOnly and SameSite=Strict, and ``Secure`` (named
``__Host-sagaflow``) unless configured off or the UI is served on plain-HTTP loopback. Every
session, anonymous ones too, carries a random CSRF token that each form echoes;
:func:`check_csrf` refuses a POST whose token does not match or whose ``Origin`` is another
site.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.auth import Principal
from coordinator.ui.settings import UiSettings

__all__ = ["CsrfRefused", "Session", "SessionCodec", "check_csrf", "is_loopback_http"]


class CsrfRefused(Exception):
    """A state-changing request without the session's CSRF token, or from another origin."""


@dataclass
class Session:
    csrf: str
    #: The server-side session's id (None: nobody signed in).
    sid: str | None = None
    #: Who signed in, resolved from the server-side session on each request.
    principal: Principal | None = None
    flash: dict[str, str] | None = None
    dirty: bool = field(default=False, compare=False)

    def sign_in(self, principal: Principal, sid: str) -> None:
        self.principal, self.sid = principal, sid
        self.csrf = secrets.token_urlsafe(32)  # a new token at sign-in (no fixation)
        self.dirty = True

    def sign_out(self) -> None:
        self.principal, self.sid = None, None
        self.dirty = True

    def set_flash(self, kind: str, text: str) -> None:
        self.flash = {"kind": kind, "text": text}
        self.dirty = True

    def pop_flash(self) -> dict[str, str] | None:
        flash, self.flash = self.flash, None
        if flash is not None:
            self.dirty = True
        return flash


def is_loopback_http(request: Request) -> bool:
    """A plain-HTTP request to a loopback host (a developer's own machine)."""
    if request.url.scheme != "http":
        return False
    host = (request.url.hostname or "").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SessionCodec:
    """Reads and writes the session cookie."""

    def __init__(self, settings: UiSettings) -> None:
        secret = settings.session_secret.get_secret_value() or secrets.token_urlsafe(32)
        self._serializer = URLSafeTimedSerializer(secret, salt="sagaflow-ui-session")
        self._max_age = int(settings.session_max_age.total_seconds())
        self._secure = settings.secure_cookies

    def secure(self, request: Request) -> bool:
        """Whether the cookie is ``Secure``: as configured, else unless on loopback HTTP."""
        return self._secure if self._secure is not None else not is_loopback_http(request)

    def cookie(self, request: Request) -> str:
        return "__Host-sagaflow" if self.secure(request) else "sagaflow_session"

    def load(self, request: Request) -> Session:
        raw = request.cookies.get(self.cookie(request))
        data: Any = None
        if raw:
            try:
                data = self._serializer.loads(raw, max_age=self._max_age)
            except BadSignature:
                data = None
        if not isinstance(data, dict) or not isinstance(data.get("c"), str):
            return Session(csrf=secrets.token_urlsafe(32), dirty=True)
        sid = data.get("s") if isinstance(data.get("s"), str) else None
        flash = data.get("f") if isinstance(data.get("f"), dict) else None
        return Session(csrf=data["c"], sid=sid, flash=flash)

    def save(self, session: Session, request: Request, response: Response) -> None:
        if not session.dirty:
            return
        data: dict[str, Any] = {"c": session.csrf}
        if session.sid is not None:
            data["s"] = session.sid
        if session.flash is not None:
            data["f"] = session.flash
        response.set_cookie(self.cookie(request), self._serializer.dumps(data),
                            max_age=self._max_age, path="/", httponly=True, samesite="strict",
                            secure=self.secure(request))


def check_csrf(request: Request, session: Session, form: dict[str, str]) -> None:
    """Refuse the request unless its form carries the session's token and it comes from us."""
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        host = request.headers.get("host", "")
        if origin.split("://", 1)[-1] != host:
            raise CsrfRefused("the request comes from another origin")
    if request.headers.get("sec-fetch-site") not in (None, "same-origin", "none"):
        raise CsrfRefused("the request comes from another site")
    sent = form.get("csrf_token", "")
    if not sent or not hmac.compare_digest(sent.encode(), session.csrf.encode()):
        raise CsrfRefused("missing or wrong CSRF token: reload the page and try again")
