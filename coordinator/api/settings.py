"""Settings of the operator API, read from ``SAGAFLOW_*`` / ``SAGAFLOW_API_*`` variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from coordinator.api.principals import Role
from coordinator.config.functions import split_commas
from coordinator.config.settings import CoordinatorSettings
from participant_sdk.durations import Duration

__all__ = ["ApiSettings"]


class ApiSettings(CoordinatorSettings):
    """The coordinator's settings (DSN, saga classes, topic prefix, pool), plus who may call
    the API and how it serves."""

    #: ``name:role:token`` entries, comma-separated (``SAGAFLOW_API_TOKENS``); the role may
    #: carry the person's groups, ``name:role+group+group:token``. The token part may be
    #: ``sha256:<hex>`` to keep only a digest in the configuration.
    api_tokens: SecretStr = SecretStr("")
    #: A file of ``name:role[+group…]:token`` lines (``#`` comments), read at start.
    api_tokens_file: Path | None = None
    #: Accept JWTs (OIDC access tokens) signed with this key: an HS256 secret (32 bytes or
    #: more) or a PEM public key. Set this or the JWKS URL, with the issuer and audience.
    api_jwt_key: SecretStr = SecretStr("")
    #: Accept JWTs signed with the keys published at this JWKS URL (the provider's
    #: ``jwks_uri``), fetched when needed and again for a key id it does not know.
    api_jwt_jwks_url: str | None = None
    #: The ``iss`` every JWT must carry (required with a key or a JWKS URL).
    api_jwt_issuer: str | None = None
    #: The ``aud`` every JWT must include (required with a key or a JWKS URL).
    api_jwt_audience: str | None = None
    #: Signature algorithms accepted. Empty: HS256 with a secret, the RSA, EC and EdDSA
    #: algorithms with a public key or a JWKS URL.
    api_jwt_algorithms: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Claim holding the user name (recorded as the actor); ``sub`` when it is absent.
    api_jwt_user_claim: str = "preferred_username"
    #: Claim holding the person's groups (a list or one string; ``a.b`` reads a nested claim).
    api_jwt_groups_claim: str = "groups"
    #: Claim whose values are looked up in ``SAGAFLOW_API_JWT_ROLES``. Unset: the groups claim.
    api_jwt_role_claim: str | None = None
    #: ``value=role`` entries, comma-separated: a JWT whose role claim holds ``value`` gets
    #: ``role`` (viewer, operator, admin); the highest match wins.
    api_jwt_roles: Annotated[dict[str, Role], NoDecode] = Field(default_factory=dict)
    #: Role of a valid JWT that matches no entry of the roles map. Unset: such a JWT gets 403.
    api_jwt_default_role: Role | None = None
    #: Clock skew tolerated on ``exp`` and ``nbf``.
    api_jwt_leeway: Duration = timedelta(seconds=30)
    #: How long fetched JWKS keys are used before they are fetched again.
    api_jwks_cache: Duration = timedelta(minutes=10)
    #: Least time between two JWKS fetches caused by unknown key ids (a flood of made-up key
    #: ids cannot make the API hammer the provider).
    api_jwks_min_refresh: Duration = timedelta(seconds=30)
    #: Failed credential checks (API calls and UI sign-ins) allowed per client address and
    #: per presented credential within the window; then 429 with ``Retry-After``. 0: no limit.
    #: Counted in each API process (per replica).
    api_auth_max_failures: int = Field(default=10, ge=0)
    #: The window of the failure count.
    api_auth_failure_window: Duration = timedelta(minutes=1)
    #: Address the API binds: ``0.0.0.0`` to be reachable from other hosts or containers.
    api_host: str = "127.0.0.1"
    #: Port the API serves on.
    api_port: int = Field(default=8080, ge=0, le=65535)
    #: Run the bulk-repair job runner in this process.
    api_run_jobs: bool = True
    #: The consumer group of each participant whose group is not its own name (the SDK's
    #: default), as JSON: ``{"hotels": "hotels-v2"}``. ``GET /participants`` and the console
    #: read each group's live members and lag from Kafka.
    participant_groups: dict[str, str] = Field(default_factory=dict)
    #: How long a runner owns a claimed job without renewing its lease.
    api_job_lease: Duration = timedelta(seconds=30)
    #: How often the runner looks for jobs nothing woke it for: another replica's (when that
    #: one runs none) or a stopped runner's after its lease. This process's own start at once.
    api_job_poll: Duration = timedelta(seconds=5)

    @field_validator("api_jwt_algorithms", mode="before")
    @classmethod
    def _split_algorithms(cls, value: Any) -> Any:
        return split_commas(value)

    @field_validator("api_jwt_roles", mode="before")
    @classmethod
    def _split_roles(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        found: dict[str, str] = {}
        for item in value.split(","):
            key, sep, role = item.strip().rpartition("=")
            if not item.strip():
                continue
            if not sep or not key.strip() or not role.strip():
                raise ValueError("JWT roles are value=role entries, comma-separated")
            found[key.strip()] = role.strip()
        return found
