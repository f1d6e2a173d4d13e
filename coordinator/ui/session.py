"""The UI's session: a signed cookie holding who signed in, their role and a CSRF token.

The browser never sees a token after sign-in: the form posts it once, the API checks it
against the same table as the Bearer API and keeps only the principal's name, role and
groups (for the task inbox) in the cookie, signed with :mod:`itsdangerous` (HttpOnly,
SameSite=Strict, ``Secure`` when configured). Every session, anonymous ones too, carries a
random CSRF token that each form echoes; :func:`check_csrf` refuses a POST whose token does
not match or whose ``Origin`` is another site.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.auth import Principal, Role
from coordinator.ui.settings import UiSettings

__all__ = ["CsrfRefused", "Session", "SessionCodec", "check_csrf"]


class CsrfRefused(Exception):
    """A state-changing request without the session's CSRF token, or from another origin."""


@dataclass
class Session:
    csrf: str
    principal: Principal | None = None
    flash: dict[str, str] | None = None
    dirty: bool = field(default=False, compare=False)

    def sign_in(self, principal: Principal) -> None:
        self.principal = principal
        self.csrf = secrets.token_urlsafe(32)  # a new token at sign-in (no fixation)
        self.dirty = True

    def set_flash(self, kind: str, text: str) -> None:
        self.flash = {"kind": kind, "text": text}
        self.dirty = True

    def pop_flash(self) -> dict[str, str] | None:
        flash, self.flash = self.flash, None
        if flash is not None:
            self.dirty = True
        return flash


class SessionCodec:
    """Reads and writes the session cookie."""

    def __init__(self, settings: UiSettings) -> None:
        secret = settings.session_secret.get_secret_value() or secrets.token_urlsafe(32)
        self._serializer = URLSafeTimedSerializer(secret, salt="sagaflow-ui-session")
        self._max_age = int(settings.session_max_age.total_seconds())
        self._secure = settings.secure_cookies
        self.cookie = "__Host-sagaflow" if settings.secure_cookies else "sagaflow_session"

    def load(self, request: Request) -> Session:
        raw = request.cookies.get(self.cookie)
        data: Any = None
        if raw:
            try:
                data = self._serializer.loads(raw, max_age=self._max_age)
            except BadSignature:
                data = None
        if not isinstance(data, dict) or not isinstance(data.get("c"), str):
            return Session(csrf=secrets.token_urlsafe(32), dirty=True)
        principal = None
        if isinstance(data.get("n"), str) and data.get("r") in Role.__members__.values():
            groups: list[Any] = data["g"] if isinstance(data.get("g"), list) else []
            principal = Principal(data["n"], Role(data["r"]),
                                  frozenset(g for g in groups if isinstance(g, str)))
        flash = data.get("f") if isinstance(data.get("f"), dict) else None
        return Session(csrf=data["c"], principal=principal, flash=flash)

    def save(self, session: Session, response: Response) -> None:
        if not session.dirty:
            return
        data: dict[str, Any] = {"c": session.csrf}
        if session.principal is not None:
            data["n"], data["r"] = session.principal.name, session.principal.role.value
            if session.principal.groups:
                data["g"] = sorted(session.principal.groups)
        if session.flash is not None:
            data["f"] = session.flash
        response.set_cookie(self.cookie, self._serializer.dumps(data), max_age=self._max_age,
                            path="/", httponly=True, samesite="strict", secure=self._secure)

    def clear(self, response: Response) -> None:
        response.delete_cookie(self.cookie, path="/", httponly=True, samesite="strict",
                               secure=self._secure)


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
