"""The signing keys of a JWKS URL, cached, fetched again for a key id not seen yet.

A fetch happens when the cache is older than its lifetime, or when a JWT names a key id the
cache lacks (the provider rotated its keys) and the last fetch is older than ``min_refresh``;
so made-up key ids cannot make the API hammer the provider. One fetch at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import timedelta

import httpx
import jwt

from coordinator.api.errors import ApiError, Unauthenticated

__all__ = ["JwksCache"]

log = logging.getLogger(__name__)


class JwksCache:
    """The keys of one JWKS URL, by key id."""

    def __init__(self, url: str, *, ttl: timedelta, min_refresh: timedelta,
                 timeout: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self._ttl = ttl.total_seconds()
        self._min_refresh = min_refresh.total_seconds()
        self._timeout = timeout
        self._clock = clock
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key ``kid`` names (or the only key, for a JWT without ``kid``)."""
        async with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= self._ttl
            unknown = self._find(kid) is None
            may_refresh = self._fetched_at is None or now - self._fetched_at >= self._min_refresh
            if stale or (unknown and may_refresh):
                await self._fetch()
            found = self._find(kid)
        if found is None:
            raise Unauthenticated(f"the JWT's key id {str(kid)[:64]!r} is not among the "
                                  "provider's keys", code="unknown_key")
        return found

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    async def _fetch(self) -> None:
        try:
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                response = await client.get(self.url)
                response.raise_for_status()
                data = response.json()
            keys = jwt.PyJWKSet.from_dict(data).keys
        except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
            log.warning("JWKS fetch from %s failed: %s", self.url, exc)
            if self._keys:  # keep serving the keys we have
                return
            raise ApiError("the identity provider's keys cannot be fetched; retry",
                           code="jwks_unavailable", status=503) from None
        self._keys = {k.key_id: k for k in keys if k.public_key_use in (None, "sig")}
        self._fetched_at = self._clock()
        log.debug("fetched %d keys from %s", len(self._keys), self.url)
