"""``/healthz``, ``/readyz`` and ``/metrics`` of the worker, the relay and a participant, as
real processes whose Postgres connections go through a proxy.

While the proxy turns every connection away, each process stays alive (``/healthz`` 200) and
says it is not ready (``/readyz`` 503, with the reason); once Postgres is reachable again, it
is ready again by itself. That is the difference a Kubernetes deployment needs: a database
failover takes the pods out of rotation instead of restarting them.
"""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from tests.chaos.conftest import MakeStack
from tests.chaos.support.proxy import TcpProxy
from tests.chaos.support.services import free_port

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(150)]

PORT_VARS = {"coordinator": "SAGAFLOW_METRICS_PORT", "relay": "SAGAFLOW_RELAY_METRICS_PORT",
             "payments": "SAGAFLOW_PARTICIPANT_METRICS_PORT"}
METRIC = {"coordinator": "sagaflow_sagas_in_flight", "relay": "sagaflow_relay_rows_published",
          "payments": "sagaflow_participant"}


def listening_on(port: int) -> set[str]:
    """The local addresses a socket listens on at ``port`` (Linux ``/proc/net/tcp*``)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    raw = bytes.fromhex(address)  # 32-bit words, little-endian
                    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
                    found.add(socket.inet_ntop(family, raw))
    return found


async def probe_all(client: httpx.AsyncClient, ports: dict[str, int],
                    path: str) -> dict[str, tuple[int, str]]:
    found = {}
    for name, port in ports.items():
        try:
            got = await client.get(f"http://127.0.0.1:{port}{path}")
            found[name] = (got.status_code, got.text)
        except httpx.TransportError as exc:
            found[name] = (0, repr(exc))
    return found


async def wait_for(client: httpx.AsyncClient, ports: dict[str, int], path: str, status: int,
                   within: float) -> dict[str, tuple[int, str]]:
    deadline = time.monotonic() + within
    while True:
        found = await probe_all(client, ports, path)
        if all(code == status for code, _ in found.values()) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.3)


async def test_probes_follow_the_database(make_stack: MakeStack, pg_url: str) -> None:
    host_port = pg_url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    async with TcpProxy(host, int(port)) as proxy:
        stack = await make_stack(proc_pg_url=f"postgresql://postgres@127.0.0.1:{proxy.port}/x")
        ports = {name: free_port() for name in PORT_VARS}
        try:
            env = {name: {PORT_VARS[name]: str(port)} for name, port in ports.items()}
            stack.start(stack.coordinator(**env["coordinator"]).name)
            stack.start(stack.relay(**env["relay"]).name)
            stack.start(stack.participant("payments", **env["payments"]).name)
            await stack.wait_ready()
            async with httpx.AsyncClient(timeout=5) as client:
                ready = await wait_for(client, ports, "/readyz", 200, within=20)
                assert all(code == 200 for code, _ in ready.values()), ready
                # Unconfigured, every probe port is reachable from this host only.
                bound = {name: listening_on(port) for name, port in ports.items()}
                assert all(found == {"127.0.0.1"} for found in bound.values()), bound
                alive = await probe_all(client, ports, "/healthz")
                assert all(code == 200 for code, _ in alive.values()), alive
                metrics = await probe_all(client, ports, "/metrics")
                for name, (code, text) in metrics.items():
                    assert code == 200 and METRIC[name] in text, (name, code, text[:300])
                missing = await probe_all(client, ports, "/nope")
                assert all(code == 404 for code, _ in missing.values()), missing

                proxy.refuse(3600)
                down = await wait_for(client, ports, "/readyz", 503, within=20)
                assert all(code == 503 and "unavailable" in text
                           for code, text in down.values()), down
                alive = await probe_all(client, ports, "/healthz")
                assert all(code == 200 for code, _ in alive.values()), alive

                proxy.refuse(0)
                back = await wait_for(client, ports, "/readyz", 200, within=30)
                assert all(code == 200 for code, _ in back.values()), back
            assert all(proc.alive for proc in stack.procs.values()), stack.procs
        finally:
            await stack.stop_all()
