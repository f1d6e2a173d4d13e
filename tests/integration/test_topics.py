"""``sagaflow-coordinator topics`` creates a saga type's topics on the real broker, with the
partitions asked for, and leaves existing ones alone."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _topics(kafka_bootstrap: str, prefix: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "topics", "--saga", "examples.order_saga:OrderSaga",
         "--kafka-bootstrap", kafka_bootstrap, "--topic-prefix", prefix, *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, check=False)


async def test_topics_are_created_once_with_the_partitions_asked_for(
        kafka_bootstrap: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    wanted = [f"{prefix}.inventory.commands", f"{prefix}.payments.commands",
              f"{prefix}.replies", f"{prefix}.shipping.commands", f"{prefix}.signals"]
    listed = _topics(kafka_bootstrap, prefix, "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == wanted

    first = _topics(kafka_bootstrap, prefix, "--partitions", "3", "--replication-factor", "1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [f"{t}: created" for t in wanted]
    again = _topics(kafka_bootstrap, prefix, "--partitions", "5", "--replication-factor", "1")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"{t}: exists" for t in wanted]

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(wanted)
    finally:
        await admin.close()
    assert {d["topic"]: len(d["partitions"]) for d in described} == dict.fromkeys(wanted, 3)
