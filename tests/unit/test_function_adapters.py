"""The trigger event shapes, decoded without services (the real path: test_functions_e2e)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from participant_sdk.functions import (
    CloudEventError,
    LambdaEventError,
    batch_item_failures,
    cloudevent_record,
    cloudevents_app,
    lambda_records,
)
from participant_sdk.records import InboundRecord

MSK_EVENT: dict[str, Any] = {
    "eventSource": "aws:kafka",
    "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/vpc-2priv-2pub/abc",
    "bootstrapServers": "b-2.demo.kafka.us-east-1.amazonaws.com:9092",
    "records": {
        "orders-1": [
            {"topic": "orders", "partition": 1, "offset": 16, "timestamp": 1545084650988,
             "timestampType": "CREATE_TIME", "value": base64.b64encode(b"second").decode(),
             "headers": []},
            {"topic": "orders", "partition": 1, "offset": 15, "timestamp": 1545084650987,
             "timestampType": "CREATE_TIME", "key": base64.b64encode(b"saga-1").decode(),
             "value": base64.b64encode(b"first").decode(),
             "headers": [{"traceparent": [48, 48]}, {"bin": [-1, 127, -128]}]},
        ],
        "orders-0": [
            {"topic": "orders", "partition": 0, "offset": 3, "timestamp": 1545084650987,
             "timestampType": "CREATE_TIME", "key": base64.b64encode(b"k").decode(),
             "headers": []},
        ],
    },
}


def test_lambda_records_decode_keys_values_and_signed_header_bytes() -> None:
    records = lambda_records(MSK_EVENT)
    assert [(r.partition, r.offset) for r in records] == [(0, 3), (1, 15), (1, 16)]
    tombstone, first, second = records
    assert tombstone.value is None and tombstone.key == b"k"
    assert first.key == b"saga-1" and first.value == b"first"
    assert list(first.headers) == [("traceparent", b"00"), ("bin", b"\xff\x7f\x80")]
    assert second.key is None and second.value == b"second"
    self_managed = dict(MSK_EVENT, eventSource="SelfManagedKafka")
    del self_managed["eventSourceArn"]
    assert lambda_records(self_managed) == records


@pytest.mark.parametrize("event", [
    {"Records": []},
    {"eventSource": "aws:sqs", "records": {}},
    {"eventSource": "aws:kafka", "records": {"t-0": [{"topic": "t"}]}},
    {"eventSource": "aws:kafka", "records": {"t-0": [
        {"topic": "t", "partition": 0, "offset": 1, "value": "not base64!"}]}},
])
def test_lambda_records_refuse_what_is_not_a_kafka_batch(event: dict[str, Any]) -> None:
    with pytest.raises(LambdaEventError):
        lambda_records(event)


def test_batch_item_failures_name_the_first_failed_offset_per_partition() -> None:
    records = lambda_records(MSK_EVENT)
    assert batch_item_failures(records, []) == {"batchItemFailures": []}
    assert batch_item_failures(records, [2, 1, 0]) == {"batchItemFailures": [
        {"itemIdentifier": {"partition": "orders-0", "offset": 3}},
        {"itemIdentifier": {"partition": "orders-1", "offset": 15}},
    ]}


BINARY = {
    "ce-specversion": "1.0", "ce-id": "partition:2/offset:41",
    "ce-source": "/apis/v1/namespaces/default/kafkasources/replies#sagaflow.replies",
    "ce-type": "dev.knative.kafka.event", "ce-subject": "partition:2#41", "ce-key": "saga-7",
    "ce-kafkaheadersagamessageid": "m-1", "traceparent": "00-abc-def-01",
    "content-type": "application/json",
}


def test_binary_cloudevent_carries_the_record() -> None:
    record = cloudevent_record(BINARY, b'{"a":1}')
    assert (record.topic, record.partition, record.offset) == ("sagaflow.replies", 2, 41)
    assert record.key == b"saga-7" and record.value == b'{"a":1}'
    assert dict(record.headers) == {"sagamessageid": b"m-1", "traceparent": b"00-abc-def-01"}


def test_structured_cloudevent_with_json_data_or_base64() -> None:
    attrs = {k[3:]: v for k, v in BINARY.items() if k.startswith("ce-")}
    headers = {"content-type": "application/cloudevents+json; charset=utf-8"}
    as_json = cloudevent_record(headers, json.dumps(dict(attrs, data={"a": 1})).encode())
    assert as_json.value == b'{"a":1}' and as_json.offset == 41
    raw = base64.b64encode(b"\x00bytes").decode()
    as_b64 = cloudevent_record(headers, json.dumps(dict(attrs, data_base64=raw)).encode())
    assert as_b64.value == b"\x00bytes"
    no_subject = dict(attrs, data="x")
    del no_subject["subject"]
    assert cloudevent_record(headers, json.dumps(no_subject).encode()).partition == 2


@pytest.mark.parametrize("change", [
    {"ce-specversion": "0.3"},
    {"ce-source": "/apis/v1/namespaces/default/kafkasources/replies"},
    {"ce-subject": "nope", "ce-id": "nope"},
])
def test_a_request_that_is_not_a_kafkasource_event_is_refused(change: dict[str, str]) -> None:
    with pytest.raises(CloudEventError):
        cloudevent_record(dict(BINARY, **change), b"{}")


async def test_the_asgi_app_answers_202_503_and_400() -> None:
    seen: list[InboundRecord] = []
    redeliver = False

    async def entry(records: Sequence[InboundRecord]) -> list[int]:
        seen.extend(records)
        return [0] if redeliver else []

    app = cloudevents_app(lambda: entry)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://fn") as client:
        assert (await client.get("/")).status_code == 200
        assert (await client.post("/", headers=BINARY, content=b"{}")).status_code == 202
        redeliver = True
        assert (await client.post("/", headers=BINARY, content=b"{}")).status_code == 503
        bad = await client.post("/", headers={"content-type": "application/json"}, content=b"{}")
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_cloudevent"
    assert len(seen) == 2 and seen[0].offset == 41
