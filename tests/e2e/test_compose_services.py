"""compose.yaml's application services, run here as they run in their containers.

There is no Docker engine on this machine, so the test takes every app service's ``command``
and ``environment`` from compose.yaml as written and runs them as local processes, with only
what a container network provides rewritten: the host names ``postgres``, ``kafka`` and
``jaeger`` become the local services, each database name gets a prefix of this run (so the
shared server stays clean), the topic prefix is this run's, and the API gets a free port.
Then an order saga and a checkout saga (the carriers' race) are started through the API with
the compose file's operator token, and must complete; the API's healthcheck command passes.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from examples.stack import drop_database, fresh_database, processes
from tests.chaos.support.services import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
INFRA = {"postgres", "kafka", "jaeger"}
ORDER = {"order_id": "c-1", "customer_id": "alice", "amount_cents": 1200, "sku": "sku-1",
         "quantity": 1, "address": "1 Main St"}
CHECKOUT = {"order_id": "c-2", "customer_id": "alice", "amount_cents": 900,
            "address": "1 Main St", "lines": [{"sku": "sku-1", "quantity": 1}]}


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def local_argv(command: list[str]) -> list[str]:
    """The container's command with this venv's interpreter and console scripts."""
    first, *rest = command
    if first == "python":
        return [sys.executable, *rest]
    script = Path(sys.executable).parent / first
    found = str(script) if script.exists() else shutil.which(first)
    assert found, f"{first} is not installed in this environment"
    return [found, *rest]


def localise(value: str, *, pg: str, kafka: str, otlp: str, prefix: str) -> str:
    """What the container network resolves, pointed at the local services."""
    value = re.sub(r"postgresql://([^@]+)@postgres:5432/(\w+)",
                   lambda m: f"postgresql://{m[1]}@{pg}/{prefix}_{m[2]}", value)
    return value.replace("kafka:9092", kafka).replace("http://jaeger:4318", otlp)


async def test_compose_app_services_run_sagas_end_to_end(
    pg_url: str, kafka_bootstrap: str, jaeger_otlp: str, tmp_path: Path
) -> None:
    spec = compose()
    prefix = f"cmp{uuid.uuid4().hex[:8]}"
    pg = pg_url.split("@", 1)[1].split("/", 1)[0]
    databases = re.findall(r"CREATE DATABASE (\w+);", spec["configs"]["create-databases"]
                           ["content"])
    for name in ["postgres", *databases]:
        await fresh_database(pg_url, f"{prefix}_{name}")
    api_port = free_port()
    commands = {}
    for name, service in spec["services"].items():
        if name in INFRA:
            continue
        env = {k: localise(str(v), pg=pg, kafka=kafka_bootstrap, otlp=jaeger_otlp,
                           prefix=prefix) for k, v in service["environment"].items()}
        env["SAGAFLOW_TOPIC_PREFIX"] = prefix
        if name == "api":
            env["SAGAFLOW_API_PORT"] = str(api_port)
        commands[name] = (local_argv(service["command"]), env)
    token = spec["services"]["api"]["environment"]["SAGAFLOW_API_TOKENS"].split(":")[2]
    healthcheck = spec["services"]["api"]["healthcheck"]["test"][1:]
    try:
        with processes(commands, tmp_path / "logs", quiet=True) as procs:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=10,
                                         headers={"Authorization": f"Bearer {token}"}) as api:
                await wait_ready(api, procs, tmp_path / "logs")
                check = [local_argv(healthcheck[:1])[0], *healthcheck[1:]]
                check[-1] = check[-1].replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
                probe = await asyncio.create_subprocess_exec(*check)
                assert await asyncio.wait_for(probe.wait(), 20) == 0, "the API's healthcheck failed"
                started = {}
                for saga_type, body in (("order", ORDER), ("checkout", CHECKOUT)):
                    r = await api.post("/sagas", json={"type": saga_type, "input": body})
                    assert r.status_code == 201, r.text
                    started[saga_type] = r.json()["saga_id"]
                for saga_type, saga_id in started.items():
                    status = await wait_settled(api, saga_id, procs, tmp_path / "logs")
                    assert status == "completed", (saga_type, status)
            alive = {name: proc.poll() for name, proc in procs.items()}
            assert all(code is None for code in alive.values()), alive
    finally:
        for name in ["postgres", *databases]:
            await drop_database(pg_url, f"{prefix}_{name}")


def log_tails(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                     for p in sorted(logs.glob("*.log")))


async def wait_ready(api: httpx.AsyncClient, procs: dict[str, subprocess.Popen[bytes]],
                     logs: Path) -> None:
    deadline = time.monotonic() + 90
    while True:
        dead = {n: p.poll() for n, p in procs.items() if p.poll() is not None}
        assert not dead, f"{dead}\n{log_tails(logs)}"
        try:
            if (await api.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, log_tails(logs)
        await asyncio.sleep(0.3)


async def wait_settled(api: httpx.AsyncClient, saga_id: str,
                       procs: dict[str, subprocess.Popen[bytes]], logs: Path) -> str:
    deadline = time.monotonic() + 90
    while True:
        status: str = (await api.get(f"/sagas/{saga_id}")).json()["status"]
        if status in ("completed", "compensated", "dead", "cancelled"):
            return status
        assert time.monotonic() < deadline, f"{saga_id} still {status}\n{log_tails(logs)}"
        await asyncio.sleep(0.3)
