"""Static tokens and API keys: ``name:role:token``, optionally ``name:role+group+group:token``.

Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest` against
every entry, so neither the configuration dump nor the timing gives one away. Tokens are never
logged. Each entry has a *key id* (a digest of its digest) that a UI session records, so the
session ends as soon as the entry leaves the configuration.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from coordinator.api.principals import AuthConfigError, Principal, Role
from coordinator.api.settings import ApiSettings

__all__ = ["TokenAuth"]

log = logging.getLogger(__name__)

#: A group name: no separator of the token syntax (``:``, ``,``, ``+``) and no whitespace.
_GROUP = re.compile(r"^[^\s:,+]{1,200}$")


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    digest: bytes
    key_id: str


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _key_id(digest: bytes) -> str:
    return "token:" + hashlib.sha256(b"sagaflow-key-id:" + digest).hexdigest()[:32]


def _role_and_groups(name: str, field: str) -> tuple[Role, frozenset[str]]:
    role, *groups = [part.strip() for part in field.split("+")]
    try:
        parsed = Role(role)
    except ValueError:
        raise AuthConfigError(
            f"token {name!r}: unknown role {role!r} (roles: viewer, operator, admin)"
        ) from None
    for group in groups:
        if not _GROUP.match(group):
            raise AuthConfigError(f"token {name!r}: bad group name {group[:40]!r} (no spaces, "
                                  "':', ',' or '+')")
    return parsed, frozenset(groups)


class TokenAuth:
    """The token table. Build it from entries, a spec string, a file or the settings."""

    def __init__(self, entries: Iterable[tuple[str, Role | str, str]] = ()) -> None:
        self._entries: list[_Entry] = []
        for name, role, token in entries:
            self.add(name, role, token)

    def add(self, name: str, role: Role | str, token: str,
            groups: Iterable[str] = ()) -> None:
        """One entry; ``role`` may carry groups (``operator+finance+managers``)."""
        if not name:
            raise AuthConfigError("a token entry has an empty name")
        parsed, more = _role_and_groups(name, str(role))
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
        principal = Principal(name, parsed, more | frozenset(groups))
        self._entries.append(_Entry(principal, digest, _key_id(digest)))

    @classmethod
    def parse(cls, spec: str, *, separator: str = ",") -> TokenAuth:
        """``name:role[+group…]:token`` entries separated by ``separator`` (blank ones and
        ``#`` comments skipped). The token is everything after the second colon."""
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
        return auth

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str) -> tuple[Principal, str] | None:
        """The principal owning ``token`` and its entry's key id, or None. Checks every entry
        (constant work)."""
        digest = _digest(token)
        found: _Entry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry
        return None if found is None else (found.principal, found.key_id)

    def authenticate(self, token: str) -> Principal | None:
        """The principal owning ``token``, or None."""
        found = self.lookup(token)
        return None if found is None else found[0]

    def by_key_id(self, key_id: str) -> Principal | None:
        """The principal of the entry with this key id, if it is still configured."""
        for entry in self._entries:
            if hmac.compare_digest(entry.key_id, key_id):
                return entry.principal
        return None
