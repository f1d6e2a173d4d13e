"""Every Kafka client sagaflow makes, over SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512,
against a real broker that accepts nothing else (``secure_kafka``), configured only through the
``SAGAFLOW_KAFKA_*`` variables a user sets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from coordinator.config.settings import CoordinatorSettings
from outbox_relay.relay import producer_config
from outbox_relay.settings import RelaySettings
from participant_sdk.settings import ParticipantSettings
from tests.integration.secure_kafka import PASSWORD, USER, SecureBroker, secure_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with secure_broker(tmp_path_factory.mktemp("sasl-ssl")) as found:
        yield found


def _security_env(broker: SecureBroker, mechanism: str, password: str = PASSWORD) -> dict[str, str]:
    return {"SAGAFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "SAGAFLOW_KAFKA_SASL_MECHANISM": mechanism,
            "SAGAFLOW_KAFKA_SASL_USERNAME": USER,
            "SAGAFLOW_KAFKA_SASL_PASSWORD": password,
            "SAGAFLOW_KAFKA_SSL_CAFILE": str(broker.cafile)}


def _topics_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "topics", "--saga", "examples.order_saga:OrderSaga",
         *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=90,
        check=False)


async def _one(consumer: AIOKafkaConsumer) -> bytes:
    await consumer.start()
    try:
        msg = await asyncio.wait_for(consumer.getone(), 30)
        return bytes(msg.value)
    finally:
        await consumer.stop()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_topics_relay_participant_and_worker_clients_over_sasl_ssl(
        broker: SecureBroker, mechanism: str, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = f"s{uuid.uuid4().hex[:8]}"
    env = _security_env(broker, mechanism)
    made = await asyncio.to_thread(
        _topics_cli, {**env, "SAGAFLOW_KAFKA_BOOTSTRAP": broker.bootstrap},
        "--topic-prefix", prefix, "--partitions", "1", "--replication-factor", "1")
    assert made.returncode == 0, made.stderr
    assert f"{prefix}.payments.commands: created" in made.stdout.splitlines()

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    relay = RelaySettings(postgres_dsn="postgresql://unused/x", kafka_bootstrap=broker.bootstrap)
    participant = ParticipantSettings(dsn="postgresql://unused/x")
    worker = CoordinatorSettings()

    producer = AIOKafkaProducer(**producer_config(relay))  # the relay's producer
    await producer.start()
    try:
        await producer.send_and_wait(f"{prefix}.payments.commands", b"command")
    finally:
        await producer.stop()
    command = await _one(AIOKafkaConsumer(  # a participant's consumer
        f"{prefix}.payments.commands", bootstrap_servers=broker.bootstrap,
        group_id=f"{prefix}-payments", auto_offset_reset="earliest",
        **participant.kafka_security.client_kwargs()))
    assert command == b"command"

    replier = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                               **participant.kafka_security.client_kwargs())
    await replier.start()
    try:
        await replier.send_and_wait(f"{prefix}.replies", b"reply")
    finally:
        await replier.stop()
    reply = await _one(AIOKafkaConsumer(  # the worker's consumer
        f"{prefix}.replies", bootstrap_servers=broker.bootstrap, group_id=f"{prefix}-coord",
        auto_offset_reset="earliest", **worker.kafka_security.client_kwargs()))
    assert reply == b"reply"


async def test_a_wrong_password_is_refused(broker: SecureBroker,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    env = _security_env(broker, "SCRAM-SHA-512", password="wrong")
    refused = await asyncio.to_thread(_topics_cli, env, "--kafka-bootstrap", broker.bootstrap)
    assert refused.returncode == 4, refused.stderr  # ExitCode.KAFKA
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(("sagaflow-coordinator: error: Kafka refused: ",
                            "sagaflow-coordinator: error: cannot reach Kafka: ")), refused.stderr
    assert "Traceback" not in refused.stderr and "wrong" not in refused.stderr
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                **CoordinatorSettings().kafka_security.client_kwargs())
    with pytest.raises(KafkaError):
        await asyncio.wait_for(producer.start(), 30)
    await producer.stop()
