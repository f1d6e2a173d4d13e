"""Who calls the API: a person (a user name and groups) with a role.

Roles are ordered ``viewer`` < ``operator`` < ``admin``. A principal comes from a static token
(:mod:`coordinator.api.tokens`) or a verified JWT (:mod:`coordinator.api.jwt_auth`); its name is
what the history records as the actor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["AuthConfigError", "Principal", "Role"]


class AuthConfigError(ValueError):
    """A token entry or a JWT setting is malformed (the message never contains a secret)."""


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        return _RANK[self] >= _RANK[needed]

    @classmethod
    def highest(cls, roles: set[Role]) -> Role | None:
        return max(roles, key=_RANK.__getitem__) if roles else None


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who called: the user name (recorded as the actor), the role, and the groups the person
    belongs to (candidate groups of human tasks)."""

    name: str
    role: Role
    groups: frozenset[str] = field(default_factory=frozenset)
