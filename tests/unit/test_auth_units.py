"""Who calls, without services: static token entries with groups, JWT claim checks (HS256 and a
PEM key made here), the role mapping, and the failure limit."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from coordinator.api import ApiSettings
from coordinator.api.auth import Authenticator, Principal, Role, TokenAuth
from coordinator.api.errors import ApiError, Forbidden, TooManyAttempts, Unauthenticated
from coordinator.api.jwks import JwksCache
from coordinator.api.jwt_auth import JwtVerifier, looks_like_jwt
from coordinator.api.principals import AuthConfigError
from coordinator.api.rate_limit import FailureLimiter

SECRET = "an-hmac-secret-long-enough-for-hs512-too-" + "x" * 32
ISS, AUD = "https://idp.test/realms/acme", "sagaflow"


def _token(claims: dict[str, Any] | None = None, *, key: Any = SECRET, alg: str = "HS256",
           drop: tuple[str, ...] = (), **headers: Any) -> str:
    now = int(time.time())
    body = {"iss": ISS, "aud": AUD, "exp": now + 3600, "iat": now, "sub": "u-123",
            "preferred_username": "fatima", "groups": ["finance", "ops"], **(claims or {})}
    for name in drop:
        body.pop(name)
    return jwt.encode(body, key, algorithm=alg, headers=headers or None)


def _verifier(**options: Any) -> JwtVerifier:
    defaults: dict[str, Any] = {"issuer": ISS, "audience": AUD, "key": SECRET,
                                "roles": {"ops": Role.OPERATOR, "finance": Role.VIEWER},
                                "leeway": timedelta(0)}
    return JwtVerifier(**{**defaults, **options})


def test_every_existing_token_spec_still_parses() -> None:
    digest = hashlib.sha256(b"s3cret-token").hexdigest()
    auth = TokenAuth.parse(f"a:admin:sha256:{digest}, b:viewer:with:colons:ok,,# note")
    assert auth.authenticate("s3cret-token") == Principal("a", Role.ADMIN)
    assert auth.authenticate("with:colons:ok") == Principal("b", Role.VIEWER, frozenset())
    assert auth.authenticate("nope") is None


def test_groups_ride_on_the_role_field(tmp_path: Path) -> None:
    auth = TokenAuth.parse("olga:operator+finance+managers:tok:en-with-colon")
    principal = auth.authenticate("tok:en-with-colon")
    assert principal == Principal("olga", Role.OPERATOR, frozenset({"finance", "managers"}))
    file = tmp_path / "tokens"
    file.write_text("# people\nada:admin+/platform/sre:ada-token-1\nvera:viewer:vera-token-1\n")
    from_file = TokenAuth.from_settings(ApiSettings(api_tokens_file=file))
    assert from_file.authenticate("ada-token-1").groups == {"/platform/sre"}  # type: ignore[union-attr]
    assert from_file.authenticate("vera-token-1").groups == frozenset()  # type: ignore[union-attr]


@pytest.mark.parametrize(("spec", "message"), [
    ("olga:boss:token-123", "unknown role 'boss'"),
    ("olga:operator+:token-123", "bad group name ''"),
    ("olga:operator+fin ance:token-123", "bad group name"),
    ("olga:operator:short", "at least 8 characters"),
    ("olga-operator-token", "not name:role:token"),
])
def test_bad_entries_are_refused_without_the_token(spec: str, message: str) -> None:
    with pytest.raises(AuthConfigError, match=message) as caught:
        TokenAuth.parse(spec)
    assert "token-123" not in str(caught.value)


def test_a_key_id_finds_its_entry_until_the_entry_is_gone() -> None:
    before = TokenAuth.parse("olga:operator:olga-token-1,vera:viewer:vera-token-1")
    found = before.lookup("olga-token-1")
    assert found is not None
    principal, key_id = found
    assert before.by_key_id(key_id) == principal
    assert "olga-token-1" not in key_id
    promoted = TokenAuth.parse("olga:admin:olga-token-1")
    assert promoted.by_key_id(key_id) == Principal("olga", Role.ADMIN)
    assert TokenAuth.parse("vera:viewer:vera-token-1").by_key_id(key_id) is None


async def test_a_valid_jwt_makes_a_person_with_groups_and_the_highest_role() -> None:
    principal, expires = await _verifier().verify(_token())
    assert principal == Principal("fatima", Role.OPERATOR, frozenset({"finance", "ops"}))
    assert expires.timestamp() == pytest.approx(time.time() + 3600, abs=5)


async def test_the_user_falls_back_to_sub_and_claims_may_be_nested() -> None:
    verifier = _verifier(groups_claim="realm_access.roles", roles={"admins": Role.ADMIN})
    token = _token({"realm_access": {"roles": ["admins", "users"]}}, drop=("preferred_username",))
    principal, _ = await verifier.verify(token)
    assert principal == Principal("u-123", Role.ADMIN, frozenset({"admins", "users"}))
    by_claim = _verifier(role_claim="sagaflow_role", roles={"operator": Role.OPERATOR})
    assert (await by_claim.verify(_token({"sagaflow_role": "operator"})))[0].role is Role.OPERATOR


async def test_a_jwt_without_a_mapped_role_gets_the_default_or_403() -> None:
    token = _token({"groups": ["marketing"]})
    with pytest.raises(Forbidden) as caught:
        await _verifier().verify(token)
    assert caught.value.code == "no_role"
    principal, _ = await _verifier(default_role=Role.VIEWER).verify(token)
    assert principal.role is Role.VIEWER and principal.groups == {"marketing"}


# Each token is minted when its case runs, not when the module is collected: a long run
# (unit tests go last) would otherwise outlive the lifetimes the cases depend on.
@pytest.mark.parametrize(("mint", "code"), [
    (lambda: _token({"exp": int(time.time()) - 10}), "token_expired"),
    (lambda: _token({"nbf": int(time.time()) + 600}), "token_not_yet_valid"),
    (lambda: _token({"aud": "another-api"}), "invalid_audience"),
    (lambda: _token({"iss": "https://evil.test"}), "invalid_issuer"),
    (lambda: _token(key="another-secret-long-enough-for-hs512-" + "y" * 32), "invalid_signature"),
    (lambda: _token(drop=("exp",)), "missing_claim"),
    (lambda: _token(drop=("sub", "preferred_username")), "missing_claim"),
    (lambda: _token(alg="HS512"), "invalid_token"),
    (lambda: jwt.encode({"iss": ISS, "aud": AUD, "exp": int(time.time()) + 60, "sub": "x"},
                        None, algorithm="none"), "invalid_token"),
    (lambda: "eyJhbGciOiJIUzI1NiJ9.not-base64!.x", "invalid_token"),
], ids=lambda case: case if isinstance(case, str) else None)
async def test_each_bad_jwt_is_refused_with_its_reason(mint: Callable[[], str], code: str) -> None:
    with pytest.raises(Unauthenticated) as caught:
        await _verifier().verify(mint())
    assert caught.value.code == code, caught.value.message


async def test_a_pem_public_key_verifies_rs256_and_refuses_hs256_forgeries() -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    verifier = _verifier(key=pem)
    assert "HS256" not in verifier.algorithms
    principal, _ = await verifier.verify(_token(key=private, alg="RS256"))
    assert principal.name == "fatima"
    with pytest.raises(Unauthenticated):  # the classic confusion: the public key as a secret
        await verifier.verify(_hs256_by_hand(_token(), pem.encode()))


def _hs256_by_hand(token: str, secret: bytes) -> str:
    """``token``'s claims signed HS256 with ``secret`` (PyJWT refuses to sign with a PEM)."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    body = token.split(".")[1]
    signing_input = f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}.{body}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


@pytest.mark.parametrize(("options", "message"), [
    ({"key": "short"}, "32 bytes"),
    ({"issuer": ""}, "ISSUER"),
    ({"audience": ""}, "AUDIENCE"),
    ({"key": None}, "exactly one"),
    ({"key": "-----BEGIN PUBLIC KEY-----\n...", "algorithms": ["HS256"]}, "HS"),
])
def test_bad_jwt_settings_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(AuthConfigError, match=message):
        _verifier(**options)


def test_a_bad_jwt_setting_is_one_start_up_line_naming_the_variable() -> None:
    from coordinator.cli.main import _user_error

    with pytest.raises(AuthConfigError) as caught:
        Authenticator.from_settings(ApiSettings(api_jwt_key=SECRET, api_jwt_issuer=ISS))
    error = _user_error(caught.value)
    assert error is not None
    assert str(error).startswith("SAGAFLOW_API_JWT_ISSUER and SAGAFLOW_API_JWT_AUDIENCE")
    token_error = _user_error(AuthConfigError("token entry 2 is not name:role:token"))
    assert str(token_error).startswith("SAGAFLOW_API_TOKENS / SAGAFLOW_API_TOKENS_FILE: ")


def test_jwt_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"KEY": SECRET, "ISSUER": ISS, "AUDIENCE": AUD,
                        "ROLES": "ops=operator, sagaflow-admins=admin",
                        "GROUPS_CLAIM": "realm_access.roles", "DEFAULT_ROLE": "viewer"}.items():
        monkeypatch.setenv(f"SAGAFLOW_API_JWT_{name}", value)
    settings = ApiSettings()
    assert settings.api_jwt_roles == {"ops": Role.OPERATOR, "sagaflow-admins": Role.ADMIN}
    verifier = JwtVerifier.from_settings(settings)
    assert verifier is not None and verifier.algorithms == ["HS256"]
    monkeypatch.setenv("SAGAFLOW_API_JWT_ROLES", "ops:operator")
    with pytest.raises(ValueError, match="value=role"):
        ApiSettings()
    assert JwtVerifier.from_settings(ApiSettings(api_jwt_key="", api_jwt_roles={})) is None


def test_only_jwt_shaped_credentials_go_to_the_verifier() -> None:
    assert looks_like_jwt(_token())
    assert not looks_like_jwt("olga-token-1") and not looks_like_jwt("eyJ.only-one-dot")


def test_failures_are_limited_per_key_in_a_sliding_window() -> None:
    now = [1000.0]
    limiter = FailureLimiter(3, timedelta(seconds=60), clock=lambda: now[0])
    for _ in range(2):
        limiter.failed("addr:a", "cred:x")
    assert limiter.retry_after("addr:a", "cred:y") is None
    now[0] += 10
    limiter.failed("addr:a", "cred:y")
    assert limiter.retry_after("addr:a") == 50  # the oldest failure leaves at 1060
    assert limiter.retry_after("addr:b", "cred:y") is None
    now[0] += 50
    assert limiter.retry_after("addr:a") is None
    assert FailureLimiter(0, timedelta(seconds=60)).retry_after("addr:a") is None


async def test_the_authenticator_counts_only_refused_credentials() -> None:
    auth = Authenticator(TokenAuth.parse("olga:operator:olga-token-1"), _verifier(),
                         FailureLimiter(2, timedelta(minutes=1)))
    with pytest.raises(Forbidden):  # a valid JWT without a role is no guess
        await auth.authenticate(_token({"groups": []}), client="10.0.0.1")
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            await auth.authenticate("wrong-token-1", client="10.0.0.1")
    with pytest.raises(TooManyAttempts) as caught:
        await auth.authenticate("olga-token-1", client="10.0.0.1")
    assert caught.value.headers == {"Retry-After": "60"}
    assert (await auth.authenticate("olga-token-1", client="10.0.0.2")).principal.name == "olga"


async def test_an_unreachable_jwks_is_a_503_not_a_401() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jwks = JwksCache(f"http://127.0.0.1:{port}/certs", ttl=timedelta(minutes=10),
                     min_refresh=timedelta(0), timeout=2)
    verifier = JwtVerifier(issuer=ISS, audience=AUD, jwks=jwks, default_role=Role.VIEWER)
    token = _token(alg="HS256")
    with pytest.raises(ApiError) as caught:
        await verifier.verify(token.replace(token.split(".")[0], _rs256_header()))
    assert caught.value.status == 503 and caught.value.code == "jwks_unavailable"


def _rs256_header() -> str:
    header = json.dumps({"alg": "RS256", "typ": "JWT", "kid": "k1"}).encode()
    return base64.urlsafe_b64encode(header).rstrip(b"=").decode()
