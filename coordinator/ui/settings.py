"""Settings of the web UI, read from ``SAGAFLOW_UI_*`` (and ``SAGAFLOW_JAEGER_*``) variables."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from participant_sdk.durations import Duration

__all__ = ["UiSettings"]

#: The comma before the next ``name=`` entry of ``participant_dsns``.
_ENTRY_SEPARATOR = re.compile(r",(?=\s*[A-Za-z_][\w.-]*\s*=)")


class UiSettings(BaseSettings):
    """How the UI signs its sessions and where it finds Jaeger and the participants' tables."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_UI_", extra="ignore")

    #: Key that signs the session cookie. Empty: a random key per process (sessions end when
    #: the API restarts, and replicas behind one address must share a key).
    session_secret: SecretStr = SecretStr("")
    #: A session ends this long after sign-in (a JWT user's when the JWT expires, if sooner).
    session_max_age: Duration = timedelta(hours=8)
    #: A session ends when it has not been used for this long.
    session_idle_timeout: Duration = timedelta(minutes=30)
    #: Send the cookie only over HTTPS (``Secure``, ``__Host-`` name). Unset: on, except for a
    #: UI served on plain HTTP at a loopback address (``localhost``, ``127.0.0.1``, ``::1``).
    #: Set false to serve it on plain HTTP at another address (then the cookie can be sniffed).
    secure_cookies: bool | None = None
    #: Jaeger's query API (``SAGAFLOW_JAEGER_QUERY``), read server-side for the trace view.
    jaeger_query: str | None = Field(
        default=None, validation_alias=AliasChoices("SAGAFLOW_JAEGER_QUERY",
                                                    "SAGAFLOW_UI_JAEGER_QUERY"))
    #: A full Jaeger UI the trace view links to (``<url>/trace/<id>``), when one exists.
    jaeger_ui: str | None = None
    #: Participants whose dead-letter tables the UI reads: ``name=dsn`` entries, comma-separated
    #: (multi-host DSNs, ``h1:5432,h2:5432``, are fine).
    participant_dsns: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    #: How long the UI waits for Jaeger or a participant database.
    remote_timeout: Duration = timedelta(seconds=2)

    @field_validator("participant_dsns", mode="before")
    @classmethod
    def _split_dsns(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        found: dict[str, str] = {}
        # A comma starts a new entry only before ``name=``: a multi-host DSN has commas too.
        for item in _ENTRY_SEPARATOR.split(value):
            name, sep, dsn = item.strip().partition("=")
            if not item.strip():
                continue
            if not sep or not name.strip() or not dsn.strip():
                raise ValueError("participant DSNs are name=dsn entries, comma-separated")
            found[name.strip()] = dsn.strip()
        return found
