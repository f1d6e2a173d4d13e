"""Import diet of the coordinator's reply function: what its cold start must not import.

A fresh interpreter builds the reply handler the way docs/serverless.md does, with
``FunctionSettings``, and lists its modules. Each module named here cost the cold start
milliseconds once (``python -m bench.cold_start --importtime``); none is used on the reply
path: the API and UI, the worker loop and its Kafka client, schedules, metrics, exporters, the
signal batch and pydantic-settings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HANDLER = """
import json, sys
from coordinator.runtime.functions import CoordinatorFunctions, FunctionSettings
from coordinator.sagas.loading import build_registry
from participant_sdk.functions import cloudevents_app

settings = FunctionSettings.from_env(sagas=["examples.order_saga:OrderSaga"])
functions = CoordinatorFunctions(
    settings, build_registry(settings.sagas, topic_prefix=settings.topic_prefix))
replies = functions.lambda_replies()
app = cloudevents_app(functions.replies)
print(json.dumps(sorted(sys.modules)))
"""

#: Module prefixes the reply function must not import.
HEAVY = (
    "fastapi", "starlette", "uvicorn", "jinja2", "httpx",
    "opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation",
    "coordinator.api", "coordinator.ui", "coordinator.cli.main", "coordinator.cli.ops",
    "coordinator.runtime.worker.worker", "coordinator.schedules", "coordinator.config.settings",
    "pydantic_settings", "aiokafka", "prometheus_client", "holidays",
    "participant_sdk.runner", "outbox_relay.relay", "outbox_relay.tick",
    "outbox_relay.loop", "outbox_relay.leasing", "outbox_relay.publishing",
    "coordinator.runtime.signal_batch", "coordinator.runtime.signal_wire",
)


@pytest.fixture(scope="module")
def imported() -> list[str]:
    done = subprocess.run([sys.executable, "-c", HANDLER], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True,
                          env={"PATH": "", "PYTHONPATH": str(REPO)})
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


def test_the_handler_is_built(imported: list[str]) -> None:
    assert {"coordinator.runtime.functions.instance", "coordinator.runtime.functions.handlers",
            "examples.order_saga"} <= set(imported)


@pytest.mark.parametrize("prefix", HEAVY)
def test_the_reply_function_does_not_import(imported: list[str], prefix: str) -> None:
    assert [m for m in imported if m == prefix or m.startswith(prefix + ".")] == []
