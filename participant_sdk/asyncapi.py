"""The wire protocol as an AsyncAPI 3.0 document, generated from the envelope models.

The message schemas are the pydantic models' own JSON Schemas, so the document cannot say
something the code does not check. ``docs/asyncapi.json`` is this document checked in (a test
fails when it drifts); the coordinator's API serves it at ``GET /asyncapi.json``.

``python -m participant_sdk.asyncapi`` prints it; ``--write PATH`` rewrites the checked-in copy.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic.json_schema import models_json_schema

from participant_sdk.protocol import (
    HEADER_MESSAGE_ID,
    HEADER_MESSAGE_KIND,
    HEADER_PROTOCOL,
    HEADER_TRACEPARENT,
    HEADER_TRACESTATE,
    KIND_COMMAND,
    KIND_REPLY,
    PROTOCOL_VERSION,
    REPLY_ID_NAMESPACE,
    CommandEnvelope,
    ReplyEnvelope,
)
from participant_sdk.task_events import KIND_TASK_EVENT, TaskEvent

__all__ = ["asyncapi_document", "render"]

#: Header the relay adds to commands (``outbox_relay.HEADER_RELAY_EPOCH``; the SDK may not
#: import the relay, so the name is repeated here and a test pins the two together).
RELAY_EPOCH_HEADER = "sagaflow-relay-epoch"
_SPEC = "docs/wire-protocol.md in the sagaflow repository"
_KAFKA_BINDING = "0.5.0"
_SCHEMAS = "#/components/schemas/{model}"


def _headers(kind: str, *, command: bool) -> dict[str, Any]:
    props: dict[str, Any] = {
        HEADER_MESSAGE_ID: {"type": "string", "format": "uuid",
                            "description": "The envelope's message_id (UUID text)."},
        HEADER_MESSAGE_KIND: {"type": "string", "const": kind},
        HEADER_PROTOCOL: {"type": "string", "pattern": "^[1-9][0-9]*$",
                          "description": "The envelope's protocol, decimal text."},
        HEADER_TRACEPARENT: {
            "type": "string", "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
            "description": "W3C trace context, at most one. Continue it; put the context of "
            "your own span (or this one, unchanged, if you do not trace) on the reply.",
        },
        HEADER_TRACESTATE: {"type": "string", "description": "W3C trace state."},
    }
    if command:
        props[RELAY_EPOCH_HEADER] = {
            "type": "string", "pattern": "^[0-9]+\\.[0-9]+$",
            "description": "'<shard>.<epoch>' of the relay that published it (absent when "
            "the coordinator worker published the command itself); diagnostics only, ignore it.",
        }
    reader = ("A participant must not depend on headers: the body decides." if command else
              "The coordinator reads only traceparent/tracestate; the body decides.")
    return {"type": "object", "description": f"Kafka headers (UTF-8 text values). {reader}",
            "properties": props,
            "required": [HEADER_MESSAGE_ID, HEADER_MESSAGE_KIND, HEADER_PROTOCOL]}


def _kafka_key() -> dict[str, Any]:
    return {"kafka": {"bindingVersion": _KAFKA_BINDING, "key": {
        "type": "string", "format": "uuid",
        "description": "The saga id: every message of one saga lands in one partition. "
        "Use the murmur2 partitioner (the Java client's default).",
    }}}


def asyncapi_document() -> dict[str, Any]:
    """The AsyncAPI 3.0 document of protocol :data:`PROTOCOL_VERSION`."""
    _, top = models_json_schema(
        [(CommandEnvelope, "validation"), (ReplyEnvelope, "validation"),
         (TaskEvent, "serialization")],
        ref_template=_SCHEMAS,
    )
    schemas: dict[str, Any] = dict(sorted(top["$defs"].items()))
    schemas["CommandHeaders"] = _headers(KIND_COMMAND, command=True)
    schemas["ReplyHeaders"] = _headers(KIND_REPLY, command=False)
    schemas["TaskEventHeaders"] = {
        "type": "object", "description": "Kafka headers (UTF-8 text values).",
        "properties": {HEADER_MESSAGE_ID: {"type": "string", "format": "uuid"},
                       HEADER_MESSAGE_KIND: {"type": "string", "const": KIND_TASK_EVENT}},
        "required": [HEADER_MESSAGE_ID, HEADER_MESSAGE_KIND]}
    prefix = {"description": "Topic prefix of the deployment.", "default": "saga"}
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "sagaflow wire protocol",
            "version": str(PROTOCOL_VERSION),
            "description": "Commands from the sagaflow coordinator to participants, their "
            "replies, and the human-task notifications, over Kafka, as UTF-8 JSON. The full "
            f"rules (barrier, limits, malformed replies, versioning) are in {_SPEC}.",
        },
        "defaultContentType": "application/json",
        "servers": {"kafka": {
            "host": "localhost:9092", "protocol": "kafka",
            "description": "Any Kafka cluster; topics are created by the operator.",
        }},
        "channels": {
            "commands": {
                "address": "{prefix}.{participant}.commands",
                "description": "One topic per participant. Consumer group: the participant "
                "name; a new group must start at the earliest offset.",
                "parameters": {"prefix": prefix, "participant": {
                    "description": "The participant's name (the command's participant field)."}},
                "messages": {"command": {"$ref": "#/components/messages/command"}},
            },
            "tasks": {
                "address": "{prefix}.tasks",
                "description": "Every change of a human task (created, claimed, reminded, "
                "escalated, completed, rejected, expired, cancelled, ...), written to the "
                "outbox with the change: plug in a mail or chat consumer. At least once "
                "(dedupe on the message id header); one saga's changes in order.",
                "parameters": {"prefix": prefix},
                "messages": {"taskEvent": {"$ref": "#/components/messages/taskEvent"}},
            },
            "replies": {
                "address": "{prefix}.replies",
                "description": "Every participant's replies; the coordinator consumes it. "
                "Publish to the command's reply_to, which names this topic.",
                "parameters": {"prefix": prefix},
                "messages": {"reply": {"$ref": "#/components/messages/reply"}},
            },
        },
        "operations": {
            "sendCommand": {
                "action": "send", "channel": {"$ref": "#/channels/commands"},
                "summary": "The coordinator (through its outbox relay) sends a command.",
                "messages": [{"$ref": "#/channels/commands/messages/command"}],
            },
            "receiveCommand": {
                "action": "receive", "channel": {"$ref": "#/channels/commands"},
                "summary": "A participant runs the command behind its barrier and replies.",
                "messages": [{"$ref": "#/channels/commands/messages/command"}],
                "reply": {
                    "address": {"location": "$message.payload#/reply_to"},
                    "channel": {"$ref": "#/channels/replies"},
                    "messages": [{"$ref": "#/channels/replies/messages/reply"}],
                },
            },
            "receiveTaskEvent": {
                "action": "receive", "channel": {"$ref": "#/channels/tasks"},
                "summary": "A team's consumer tells people about their tasks.",
                "messages": [{"$ref": "#/channels/tasks/messages/taskEvent"}],
            },
            "receiveReply": {
                "action": "receive", "channel": {"$ref": "#/channels/replies"},
                "summary": "The coordinator applies a reply to the saga it addresses.",
                "messages": [{"$ref": "#/channels/replies/messages/reply"}],
            },
        },
        "components": {
            "messages": {
                "command": {
                    "name": "command", "title": "Command (coordinator to participant)",
                    "contentType": "application/json",
                    "headers": {"$ref": "#/components/schemas/CommandHeaders"},
                    "payload": {"$ref": "#/components/schemas/CommandEnvelope"},
                    "correlationId": {"location": "$message.payload#/message_id"},
                    "bindings": _kafka_key(),
                },
                "taskEvent": {
                    "name": "taskEvent", "title": "Human task changed (coordinator to anyone)",
                    "contentType": "application/json",
                    "headers": {"$ref": "#/components/schemas/TaskEventHeaders"},
                    "payload": {"$ref": "#/components/schemas/TaskEvent"},
                    "bindings": _kafka_key(),
                },
                "reply": {
                    "name": "reply", "title": "Reply (participant to coordinator)",
                    "contentType": "application/json",
                    "description": "message_id = uuid5(" f"{REPLY_ID_NAMESPACE}, text of "
                    "in_reply_to).",
                    "headers": {"$ref": "#/components/schemas/ReplyHeaders"},
                    "payload": {"$ref": "#/components/schemas/ReplyEnvelope"},
                    "correlationId": {"location": "$message.payload#/in_reply_to"},
                    "bindings": _kafka_key(),
                },
            },
            "schemas": schemas,
        },
    }


def render() -> str:
    """The document as the checked-in file holds it."""
    return json.dumps(asyncapi_document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m participant_sdk.asyncapi",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", metavar="PATH", help="write the document to PATH")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
