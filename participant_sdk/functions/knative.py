"""Knative ``KafkaSource``: one Kafka record per CloudEvent, POSTed over HTTP.

Binary mode puts the attributes in ``ce-*`` headers and the record value in the body;
structured mode posts one ``application/cloudevents+json`` document (``data`` or
``data_base64``). KafkaSource names the record in its attributes: ``source`` ends with
``#<topic>``, ``subject`` is ``partition:<p>#<offset>`` (``id`` is ``partition:<p>/offset:<o>``),
the ``key`` extension carries the record key and ``kafkaheader<name>`` extensions its headers.

:func:`cloudevents_app` is a dependency-free ASGI app: 2xx once the record is answered (a dead
letter included), 503 when it must be redelivered, 400 with a stable code for a request that
is not a KafkaSource CloudEvent.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from participant_sdk.functions.loop import RecordBatch
from participant_sdk.records import InboundRecord

__all__ = ["CloudEventError", "cloudevent_record", "cloudevents_app"]

log = logging.getLogger(__name__)

_STRUCTURED = "application/cloudevents+json"
_SUBJECT = re.compile(r"^partition:(\d+)#(\d+)$")
_ID = re.compile(r"^partition:(\d+)/offset:(\d+)$")
_HEADER_PREFIX = "kafkaheader"
_TRACE = ("traceparent", "tracestate")


class CloudEventError(ValueError):
    """The request is not a KafkaSource CloudEvent."""

    code = "invalid_cloudevent"


def cloudevent_record(headers: Mapping[str, str], body: bytes) -> InboundRecord:
    """The Kafka record a KafkaSource CloudEvent carries (``headers`` with lower-case names)."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == _STRUCTURED:
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise CloudEventError(f"structured CloudEvent is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise CloudEventError("structured CloudEvent is not a JSON object")
        attributes = {str(k).lower(): v for k, v in doc.items()}
        value = _structured_data(attributes)
    else:
        attributes = {k[3:]: v for k, v in headers.items() if k.startswith("ce-")}
        for name in _TRACE:
            if name in headers:
                attributes.setdefault(_HEADER_PREFIX + name, headers[name])
        value = body
    if attributes.get("specversion") != "1.0":
        raise CloudEventError(f"specversion {attributes.get('specversion')!r}, expected '1.0'")
    source = str(attributes.get("source", ""))
    topic = source.rpartition("#")[2] if "#" in source else ""
    if not topic:
        raise CloudEventError(f"source {source!r} names no topic (expected '...#<topic>')")
    match = _SUBJECT.match(str(attributes.get("subject", ""))) or _ID.match(
        str(attributes.get("id", "")))
    if match is None:
        raise CloudEventError("neither subject 'partition:<p>#<offset>' nor id "
                              "'partition:<p>/offset:<o>' names the record")
    key = attributes.get("key")
    kafka_headers = [
        (name[len(_HEADER_PREFIX):], str(v).encode())
        for name, v in attributes.items() if name.startswith(_HEADER_PREFIX)
    ]
    return InboundRecord(
        topic=topic,
        partition=int(match.group(1)),
        offset=int(match.group(2)),
        key=None if key is None else str(key).encode(),
        value=value,
        headers=kafka_headers,
    )


def _structured_data(attributes: Mapping[str, Any]) -> bytes | None:
    if "data_base64" in attributes:
        try:
            return base64.b64decode(str(attributes["data_base64"]), validate=True)
        except binascii.Error as exc:
            raise CloudEventError(f"data_base64 is not base64: {exc}") from exc
    data = attributes.get("data")
    if data is None:
        return None
    if isinstance(data, str):
        return data.encode()
    return json.dumps(data, separators=(",", ":")).encode()


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def cloudevents_app(
    entry: Callable[[], RecordBatch],
) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    """An ASGI app answering each POSTed KafkaSource CloudEvent with the entry point ``entry()``
    builds (once, on the first event). ``GET`` answers 200 for readiness probes."""
    built: list[RecordBatch] = []

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":
            await _respond(send, 200, {"status": "ok"})
            return
        if scope["method"] != "POST":
            await _respond(send, 405, {"error": "method_not_allowed"})
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        try:
            record = cloudevent_record(headers, bytes(body))
        except CloudEventError as exc:
            log.warning("rejected a request: %s", exc)
            await _respond(send, 400, {"error": exc.code, "detail": str(exc)})
            return
        if not built:
            built.append(entry())
        if await built[0]([record]):
            await _respond(send, 503, {"error": "redeliver"})
        else:
            await _respond(send, 202, None)

    return app


async def _respond(send: Send, status: int, body: dict[str, Any] | None) -> None:
    payload = b"" if body is None else json.dumps(body).encode()
    headers = [(b"content-length", str(len(payload)).encode())]
    if body is not None:
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
