"""AWS Lambda's Kafka event source (Amazon MSK, ``aws:kafka``, and self-managed Kafka,
``SelfManagedKafka``): the event's records in, a partial batch response out.

The event groups records by ``"<topic>-<partition>"``; keys and values are base64 text (a key
may be absent, a tombstone has no value) and each header is a one-entry object whose value is
an array of byte values (Java bytes, so possibly negative). The answer names, per partition,
the first record to redeliver: Lambda resumes that partition from it (``ReportBatchItemFailures``
must be on). A record that can never be answered is kept as a dead letter by the entry point and
counts as done, so one poison record does not hold back the batch.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from participant_sdk.functions.loop import FunctionLoop, RecordBatch
from participant_sdk.records import InboundRecord

__all__ = ["LambdaEventError", "batch_item_failures", "lambda_handler", "lambda_records"]

log = logging.getLogger(__name__)

_SOURCES = ("aws:kafka", "SelfManagedKafka")


class LambdaEventError(ValueError):
    """The invocation's event is not a Kafka event source batch."""


def lambda_records(event: Mapping[str, Any]) -> list[InboundRecord]:
    """The event's records, in partition then offset order."""
    if event.get("eventSource") not in _SOURCES or not isinstance(event.get("records"), dict):
        raise LambdaEventError(
            f"not a Lambda Kafka event (eventSource {event.get('eventSource')!r}); expected "
            f"one of {_SOURCES} with a 'records' object")
    out: list[InboundRecord] = []
    for group, items in event["records"].items():
        if not isinstance(items, list):
            raise LambdaEventError(f"records[{group!r}] is not a list")
        for item in items:
            try:
                out.append(InboundRecord(
                    topic=str(item["topic"]),
                    partition=int(item["partition"]),
                    offset=int(item["offset"]),
                    key=_b64(item.get("key")),
                    value=_b64(item.get("value")),
                    headers=_headers(item.get("headers") or []),
                ))
            except (KeyError, TypeError, ValueError, binascii.Error) as exc:
                raise LambdaEventError(f"bad record in {group!r}: {exc!r}") from exc
    out.sort(key=lambda r: (r.topic, r.partition, r.offset))
    return out


def batch_item_failures(records: Sequence[InboundRecord], failed: Sequence[int]) -> dict[str, Any]:
    """The partial batch response: the lowest failed offset of each topic-partition."""
    first: dict[tuple[str, int], int] = {}
    for index in failed:
        r = records[index]
        tp = (r.topic, r.partition)
        first[tp] = min(first.get(tp, r.offset), r.offset)
    return {"batchItemFailures": [
        {"itemIdentifier": {"partition": f"{topic}-{partition}", "offset": offset}}
        for (topic, partition), offset in sorted(first.items())
    ]}


def lambda_handler(
    entry: Callable[[], RecordBatch], *, loop: FunctionLoop | None = None
) -> Callable[[Mapping[str, Any], Any], dict[str, Any]]:
    """A Lambda handler ``handler(event, context)`` over the entry point ``entry()`` builds
    (called once, on the first invocation, so a cold start opens nothing before it is needed).
    """
    runner = loop or FunctionLoop()
    built: list[RecordBatch] = []

    def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        records = lambda_records(event)
        if not built:
            built.append(entry())
        failed = runner.run(_answer(built[0], records))
        if failed:
            log.warning("%d of %d records to redeliver", len(failed), len(records))
        return batch_item_failures(records, failed)

    return handler


async def _answer(entry: RecordBatch, records: list[InboundRecord]) -> list[int]:
    return list(await entry(records)) if records else []


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _headers(items: Sequence[Mapping[str, Sequence[int]]]) -> list[tuple[str, bytes]]:
    return [(name, bytes(b & 0xFF for b in value)) for item in items
            for name, value in item.items()]
