"""Function-runtime adapters: the trigger event shapes in, the batch entry points' answers out.

Each adapter is a thin translation over an entry point that takes a batch of Kafka records and
returns the indexes of the records to redeliver (:data:`RecordBatch`): the participant's
:class:`~participant_sdk.batch.CommandBatchHandler` or the coordinator's reply batch.

* :mod:`.lambda_kafka`: AWS Lambda's Kafka event source (Amazon MSK and self-managed Kafka).
* :mod:`.knative`: Knative ``KafkaSource`` CloudEvents over HTTP (binary and structured modes),
  with a small ASGI app.
* :mod:`.loop`: the event loop a warm synchronous function instance keeps between invocations.
"""

from participant_sdk.functions.knative import CloudEventError, cloudevent_record, cloudevents_app
from participant_sdk.functions.lambda_kafka import (
    LambdaEventError,
    batch_item_failures,
    lambda_handler,
    lambda_records,
)
from participant_sdk.functions.loop import FunctionLoop, RecordBatch, command_batch

__all__ = [
    "CloudEventError",
    "FunctionLoop",
    "LambdaEventError",
    "RecordBatch",
    "batch_item_failures",
    "cloudevent_record",
    "cloudevents_app",
    "command_batch",
    "lambda_handler",
    "lambda_records",
]
