"""The AsyncAPI document: generated from the envelope models, checked in, served by the API."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx

from coordinator.api.app import create_app
from coordinator.api.auth import TokenAuth
from coordinator.api.settings import ApiSettings
from outbox_relay import HEADER_RELAY_EPOCH
from participant_sdk import asyncapi
from participant_sdk.protocol import (
    MAX_ERROR_MESSAGE_LENGTH,
    CommandEnvelope,
    ErrorKind,
    Phase,
    ReplyEnvelope,
)

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "asyncapi.json"


def test_the_checked_in_document_matches_the_models() -> None:
    assert CHECKED_IN.read_text(encoding="utf-8") == asyncapi.render(), (
        "docs/asyncapi.json drifted from participant_sdk.protocol: run "
        "`python -m participant_sdk.asyncapi --write docs/asyncapi.json`")


def test_the_schemas_are_the_models_own() -> None:
    doc = asyncapi.asyncapi_document()
    schemas = doc["components"]["schemas"]
    assert doc["asyncapi"] == "3.0.0"
    reply = schemas["ReplyEnvelope"]
    assert set(reply["required"]) == {
        name for name, f in ReplyEnvelope.model_fields.items() if f.is_required()}
    assert set(schemas["CommandEnvelope"]["properties"]) == set(CommandEnvelope.model_fields)
    assert [t.get("type") for t in reply["properties"]["result"]["anyOf"]] == ["object", "null"]
    assert schemas["ErrorInfo"]["properties"]["message"]["maxLength"] == MAX_ERROR_MESSAGE_LENGTH
    assert set(schemas["ErrorKind"]["enum"]) == {k.value for k in ErrorKind}
    assert set(schemas["Phase"]["enum"]) == {p.value for p in Phase}
    assert asyncapi.RELAY_EPOCH_HEADER == HEADER_RELAY_EPOCH
    refs = json.dumps(doc)
    for name in ("CommandEnvelope", "ReplyEnvelope", "CommandHeaders", "ReplyHeaders"):
        assert f'"#/components/schemas/{name}"' in refs


async def test_the_api_serves_it_without_credentials() -> None:
    app = create_app(ApiSettings(dsn="postgresql://unused/none"),
                     auth=TokenAuth.parse(f"alice:admin:{uuid.uuid4().hex}"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        resp = await client.get("/asyncapi.json")
    assert resp.status_code == 200
    assert resp.json() == json.loads(CHECKED_IN.read_text(encoding="utf-8"))
