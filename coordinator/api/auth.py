"""Bearer tokens and API keys mapped to roles: ``viewer`` < ``operator`` < ``admin``.

Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`
against every entry, so neither the configuration dump nor the timing gives one away.
Tokens are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from fastapi import Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from coordinator.api.errors import Forbidden, Unauthenticated
from coordinator.api.settings import ApiSettings

__all__ = ["AuthConfigError", "Principal", "Role", "TokenAuth", "require"]

log = logging.getLogger(__name__)


class AuthConfigError(ValueError):
    """A token entry is malformed (the message never contains the token)."""


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        return _RANK[self] >= _RANK[needed]


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who called: the configured name (recorded as the actor), the role, and the groups the
    person is in (human tasks are offered to groups)."""

    name: str
    role: Role
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    digest: bytes


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenAuth:
    """The token table. Build it from entries, a spec string, a file or the settings."""

    def __init__(self, entries: Iterable[tuple[str, Role | str, str]] = ()) -> None:
        self._entries: list[_Entry] = []
        for name, role, token in entries:
            self.add(name, role, token)

    def add(self, name: str, role: Role | str, token: str) -> None:
        if not name:
            raise AuthConfigError("a token entry has an empty name")
        try:
            parsed = Role(role)
        except ValueError:
            raise AuthConfigError(
                f"token {name!r}: unknown role {role!r} (roles: viewer, operator, admin)"
            ) from None
        if token.startswith("sha256:"):
            try:
                digest = bytes.fromhex(token.removeprefix("sha256:"))
            except ValueError:
                raise AuthConfigError(f"token {name!r}: sha256 digest is not hex") from None
            if len(digest) != 32:
                raise AuthConfigError(f"token {name!r}: sha256 digest must be 32 bytes")
        elif len(token) < 8:
            raise AuthConfigError(f"token {name!r}: a token needs at least 8 characters")
        else:
            digest = _digest(token)
        self._entries.append(_Entry(Principal(name, parsed), digest))

    @classmethod
    def parse(cls, spec: str, *, separator: str = ",") -> TokenAuth:
        """``name:role:token`` entries separated by ``separator`` (blank ones skipped)."""
        auth = cls()
        for number, raw in enumerate(spec.split(separator), 1):
            item = raw.strip()
            if not item or item.startswith("#"):
                continue
            parts = item.split(":", 2)
            if len(parts) != 3:
                raise AuthConfigError(f"token entry {number} is not name:role:token")
            auth.add(parts[0].strip(), parts[1].strip(), parts[2].strip())
        return auth

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> TokenAuth:
        auth = cls.parse(settings.api_tokens.get_secret_value())
        if settings.api_tokens_file is not None:
            text = Path(settings.api_tokens_file).read_text(encoding="utf-8")
            auth._entries.extend(cls.parse(text, separator="\n")._entries)
        if not auth._entries:
            log.warning("no API tokens configured: every request will get 401")
        return auth

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str) -> Principal | None:
        """The principal owning ``token``, or None. Checks every entry (constant work)."""
        digest = _digest(token)
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found


_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>`")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key header")


def require(role: Role) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency: the authenticated principal, which must have at least ``role``."""

    async def dependency(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
        api_key: Annotated[str | None, Security(_api_key)],
    ) -> Principal:
        token = bearer.credentials if bearer is not None else api_key
        if not token:
            raise Unauthenticated("credentials required: send 'Authorization: Bearer <token>' "
                                  "or 'X-API-Key: <token>'")
        auth: TokenAuth = request.app.state.auth
        principal = auth.authenticate(token)
        if principal is None:
            raise Unauthenticated("unknown token", code="invalid_token")
        if not principal.role.allows(role):
            raise Forbidden(f"{principal.name} has role {principal.role.value}; this call "
                            f"needs {role.value}", details={"needed": role.value,
                                                            "role": principal.role.value})
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{role.value}"
    return dependency
