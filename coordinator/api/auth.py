"""Who may call: static tokens and JWTs, checked by one :class:`Authenticator`, and
:func:`require`, the dependency every route uses.

A credential is a static token (:mod:`coordinator.api.tokens`) or, when JWTs are configured, a
JWT (:mod:`coordinator.api.jwt_auth`). Failed checks are counted per client address and per
credential (:mod:`coordinator.api.rate_limit`); past the limit an attempt gets 429 with
``Retry-After`` before it is checked. Credentials are never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from coordinator.api.errors import Forbidden, TooManyAttempts, Unauthenticated
from coordinator.api.jwt_auth import JwtVerifier, looks_like_jwt
from coordinator.api.principals import AuthConfigError, Principal, Role
from coordinator.api.rate_limit import FailureLimiter, limiter_keys
from coordinator.api.settings import ApiSettings
from coordinator.api.tokens import TokenAuth

__all__ = ["JWT_KEY_ID", "AuthConfigError", "Authenticated", "Authenticator", "Principal",
           "Role", "TokenAuth", "require"]

log = logging.getLogger(__name__)

#: The key id of every JWT principal (a session of one lives while JWTs are accepted).
JWT_KEY_ID = "jwt"


@dataclass(frozen=True, slots=True)
class Authenticated:
    """A checked credential: who, which configured credential (``key_id``), until when."""

    principal: Principal
    key_id: str
    expires_at: datetime | None = None


class Authenticator:
    """The static tokens, the JWT verifier (if configured) and the failure limit."""

    def __init__(self, tokens: TokenAuth, jwt: JwtVerifier | None = None,
                 limiter: FailureLimiter | None = None) -> None:
        self.tokens = tokens
        self.jwt = jwt
        self.limiter = limiter or FailureLimiter(0, timedelta(minutes=1))

    @classmethod
    def from_settings(cls, settings: ApiSettings, tokens: TokenAuth | None = None
                      ) -> Authenticator:
        """The settings' tokens (or ``tokens``), JWT verifier and failure limit."""
        auth = cls(tokens if tokens is not None else TokenAuth.from_settings(settings),
                   JwtVerifier.from_settings(settings),
                   FailureLimiter(settings.api_auth_max_failures,
                                  settings.api_auth_failure_window))
        if not len(auth.tokens) and auth.jwt is None:
            log.warning("no API tokens and no JWT key configured: every request will get 401")
        return auth

    async def authenticate(self, credential: str, *, client: str | None) -> Authenticated:
        """Check ``credential`` presented from address ``client``; raise ``Unauthenticated``
        (counted as a failure), ``Forbidden`` or ``TooManyAttempts``."""
        keys = limiter_keys(client, credential)
        wait = self.limiter.retry_after(*keys)
        if wait is not None:
            raise TooManyAttempts(wait)
        try:
            return await self._check(credential)
        except Unauthenticated:
            self.limiter.failed(*keys)
            raise

    async def _check(self, credential: str) -> Authenticated:
        found = self.tokens.lookup(credential)
        if found is not None:
            return Authenticated(found[0], found[1])
        if self.jwt is not None and looks_like_jwt(credential):
            principal, expires_at = await self.jwt.verify(credential)
            return Authenticated(principal, JWT_KEY_ID, expires_at)
        raise Unauthenticated("unknown token", code="invalid_token")

    def still_valid(self, key_id: str, principal: Principal) -> Principal | None:
        """The principal a session of ``key_id`` has now: the entry's current one, ``principal``
        for a JWT while JWTs are accepted, or None once the credential is gone."""
        if key_id == JWT_KEY_ID:
            return principal if self.jwt is not None else None
        return self.tokens.by_key_id(key_id)


_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token or JWT>`")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key header")


def client_address(request: Request) -> str | None:
    """The caller's address (uvicorn puts a trusted proxy's ``X-Forwarded-For`` here)."""
    return request.client.host if request.client is not None else None


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
        auth: Authenticator = request.app.state.auth
        principal = (await auth.authenticate(token, client=client_address(request))).principal
        if not principal.role.allows(role):
            raise Forbidden(f"{principal.name} has role {principal.role.value}; this call "
                            f"needs {role.value}", details={"needed": role.value,
                                                            "role": principal.role.value})
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{role.value}"
    return dependency
