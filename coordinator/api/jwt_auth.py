"""JWTs (OIDC access tokens) as bearer credentials, verified with PyJWT.

The signature is checked against a configured key (an HS256 secret or a PEM public key) or the
keys of a JWKS URL; ``iss``, ``aud``, ``exp`` (required) and ``nbf`` are checked with a small
leeway. The user name, the groups and the role come from configured claims. Each refusal is a
401 (403 for a valid JWT that maps to no role) with a code saying why: ``token_expired``,
``token_not_yet_valid``, ``invalid_audience``, ``invalid_issuer``, ``invalid_signature``,
``unknown_key``, ``missing_claim``, ``invalid_token``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt

from coordinator.api.errors import Forbidden, Unauthenticated
from coordinator.api.jwks import JwksCache
from coordinator.api.principals import AuthConfigError, Principal, Role
from coordinator.api.settings import ApiSettings

__all__ = ["JwtVerifier", "looks_like_jwt"]

_ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
               "ES512", "EdDSA")
_REFUSALS: tuple[tuple[type[jwt.PyJWTError], str, str], ...] = (
    (jwt.ExpiredSignatureError, "token_expired", "the JWT has expired"),
    (jwt.ImmatureSignatureError, "token_not_yet_valid", "the JWT is not valid yet (nbf)"),
    (jwt.InvalidAudienceError, "invalid_audience", "the JWT is not meant for this API (aud)"),
    (jwt.InvalidIssuerError, "invalid_issuer", "the JWT comes from another issuer (iss)"),
    (jwt.InvalidSignatureError, "invalid_signature", "the JWT's signature does not verify"),
    (jwt.MissingRequiredClaimError, "missing_claim", "the JWT lacks a required claim"),
)


def looks_like_jwt(credential: str) -> bool:
    """Three base64url parts, the first a JSON object: a JWT, not a static token."""
    return credential.startswith("eyJ") and credential.count(".") == 2


def _claim(claims: Mapping[str, Any], path: str) -> Any:
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _strings(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str) and v)
    return frozenset()


class JwtVerifier:
    """Verifies a JWT and makes a :class:`Principal` of its claims."""

    def __init__(self, *, issuer: str, audience: str, key: str | None = None,
                 jwks: JwksCache | None = None, algorithms: Sequence[str] = (),
                 user_claim: str = "preferred_username", groups_claim: str = "groups",
                 role_claim: str | None = None, roles: Mapping[str, Role] | None = None,
                 default_role: Role | None = None,
                 leeway: timedelta = timedelta(seconds=30)) -> None:
        if (key is None) == (jwks is None):
            raise AuthConfigError("SAGAFLOW_API_JWT_KEY / SAGAFLOW_API_JWT_JWKS_URL: set exactly "
                                  "one of them to accept JWTs")
        if not issuer or not audience:
            raise AuthConfigError("SAGAFLOW_API_JWT_ISSUER and SAGAFLOW_API_JWT_AUDIENCE are "
                                  "required to accept JWTs")
        public = key is None or key.lstrip().startswith("-----BEGIN")
        if key is not None and not public and len(key.encode()) < 32:
            raise AuthConfigError("SAGAFLOW_API_JWT_KEY: an HS256 secret needs 32 bytes or more")
        default = _ASYMMETRIC if public else ("HS256",)
        self.algorithms = list(algorithms) or list(default)
        if public and any(a.startswith("HS") for a in self.algorithms):
            raise AuthConfigError("SAGAFLOW_API_JWT_ALGORITHMS: HS* needs a secret, not a "
                                  "public key or JWKS URL")
        self._key, self._jwks = key, jwks
        self.issuer, self.audience = issuer, audience
        self._user_claim, self._groups_claim = user_claim, groups_claim
        self._role_claim = role_claim or groups_claim
        self._roles = dict(roles or {})
        self._default_role = default_role
        self._leeway = leeway

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> JwtVerifier | None:
        """The verifier the settings describe, or None when JWTs are not configured."""
        key = settings.api_jwt_key.get_secret_value() or None
        url = settings.api_jwt_jwks_url or None
        if key is None and url is None:
            return None
        jwks = None if url is None else JwksCache(
            url, ttl=settings.api_jwks_cache, min_refresh=settings.api_jwks_min_refresh)
        return cls(issuer=settings.api_jwt_issuer or "", audience=settings.api_jwt_audience or "",
                   key=key, jwks=jwks, algorithms=settings.api_jwt_algorithms,
                   user_claim=settings.api_jwt_user_claim,
                   groups_claim=settings.api_jwt_groups_claim,
                   role_claim=settings.api_jwt_role_claim, roles=settings.api_jwt_roles,
                   default_role=settings.api_jwt_default_role, leeway=settings.api_jwt_leeway)

    async def verify(self, token: str) -> tuple[Principal, datetime]:
        """The principal of a valid JWT and when it expires; raises
        :class:`~coordinator.api.errors.Unauthenticated` (or ``Forbidden``) otherwise."""
        claims = await self._claims(token)
        name = _claim(claims, self._user_claim) or claims.get("sub")
        if not isinstance(name, str) or not name or len(name) > 200:
            raise Unauthenticated(f"the JWT has no usable {self._user_claim!r} or 'sub' claim",
                                  code="missing_claim")
        groups = _strings(_claim(claims, self._groups_claim))
        mapped = {self._roles[v] for v in _strings(_claim(claims, self._role_claim))
                  if v in self._roles}
        role = Role.highest(mapped) or self._default_role
        if role is None:
            raise Forbidden(f"{name} has no role here: none of the JWT's "
                            f"{self._role_claim!r} values is mapped in SAGAFLOW_API_JWT_ROLES",
                            code="no_role")
        return Principal(name, role, groups), datetime.fromtimestamp(claims["exp"], UTC)

    async def _claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            algorithm = header.get("alg")
            if algorithm not in self.algorithms:
                raise Unauthenticated(f"the JWT's algorithm {str(algorithm)[:20]!r} is not "
                                      f"accepted ({', '.join(self.algorithms)})",
                                      code="invalid_token")
            key: Any = self._key
            if self._jwks is not None:
                kid = header.get("kid")
                key = (await self._jwks.key(kid if isinstance(kid, str) else None)).key
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[algorithm], audience=self.audience,
                issuer=self.issuer, leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"]})
            return claims
        except jwt.PyJWTError as exc:
            for kind, code, message in _REFUSALS:
                if isinstance(exc, kind):
                    raise Unauthenticated(message, code=code) from None
            raise Unauthenticated(f"not a valid JWT: {exc}", code="invalid_token") from None
