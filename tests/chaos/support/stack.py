"""The saga stack as separate processes, for chaos scenarios.

:class:`ChaosStack` owns four fresh databases (coordinator + payments, inventory, shipping), a
unique topic prefix, and the processes it starts: coordinator workers, relays and the three
example participants. Each process runs in its own session with its output appended to a log
file, and can be SIGKILLed and started again by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from coordinator.migrations import migrate
from participant_sdk.protocol import command_topic, reply_topic

ROOT = Path(__file__).resolve().parents[3]
#: The chaos mix: the linear order saga and its parallel variant (the node tree under fire).
SAGAS = ("examples.order_saga:OrderSaga", "examples.order_saga:ParallelOrderSaga",
         "examples.order_saga:NestedOrderSaga", "examples.order_saga:FulfilmentSaga",
         "tests.chaos.support.long_sagas:LongOrderSaga")
SERVICES = ("payments", "inventory", "shipping")
PARTITIONS = 4


def database_url(server_url: str, database: str) -> str:
    """``server_url`` with another database; its query (``target_session_attrs``) is kept."""
    base, sep, query = server_url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + database + sep + query


@dataclass
class Proc:
    """One process of the stack: how to start it, and the running instance."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class ChaosStack:
    """Databases, topics and processes of one scenario."""

    admin_url: str  # Postgres server the test creates databases on (direct)
    kafka_admin: str  # bootstrap the test itself uses
    prefix: str
    logs: Path
    proc_pg_url: str  # Postgres server address the processes use (maybe a proxy)
    proc_kafka: str  # bootstrap the processes use (maybe a proxy)
    replication_factor: int = 1  # of the scenario's topics (3 on the HA cluster)
    #: Import paths of the saga classes every process (and the driver and auditor) registers.
    sagas: tuple[str, ...] = SAGAS
    databases: dict[str, str] = field(default_factory=dict)  # role -> database name
    procs: dict[str, Proc] = field(default_factory=dict)

    # -- setup and teardown ---------------------------------------------------------------

    @classmethod
    async def create(
        cls,
        *,
        pg_url: str,
        kafka: str,
        logs: Path,
        proc_pg_url: str | None = None,
        proc_kafka: str | None = None,
        prefix: str | None = None,
        replication_factor: int = 1,
        sagas: tuple[str, ...] = SAGAS,
    ) -> ChaosStack:
        stack = cls(
            replication_factor=replication_factor,
            sagas=sagas,
            admin_url=pg_url,
            kafka_admin=kafka,
            prefix=prefix or f"chaos{uuid.uuid4().hex[:8]}",
            logs=logs,
            proc_pg_url=proc_pg_url or pg_url,
            proc_kafka=proc_kafka or kafka,
        )
        logs.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
        admin = await asyncpg.connect(pg_url)
        try:
            for role in ("coordinator", *SERVICES):
                name = f"chaos_{role[:5]}_{uuid.uuid4().hex[:10]}"
                await admin.execute(f'CREATE DATABASE "{name}"')
                stack.databases[role] = name
        finally:
            await admin.close()
        conn = await asyncpg.connect(stack.dsn("coordinator"))
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await stack.create_topics()
        return stack

    def dsn(self, role: str) -> str:
        """The test's (direct) URL of a database."""
        return database_url(self.admin_url, self.databases[role])

    def proc_dsn(self, role: str) -> str:
        """The URL processes use for a database."""
        return database_url(self.proc_pg_url, self.databases[role])

    @property
    def topics(self) -> list[str]:
        return [reply_topic(self.prefix), *(command_topic(s, self.prefix) for s in SERVICES)]

    async def create_topics(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.kafka_admin)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(t, num_partitions=PARTITIONS,
                          replication_factor=self.replication_factor)
                 for t in self.topics]
            )
        finally:
            await admin.close()

    async def drop(self) -> None:
        """Stop every process and drop the databases (idempotent)."""
        await self.stop_all()
        if not self.databases:
            return
        admin = await asyncpg.connect(self.admin_url, timeout=10)
        try:
            for name in self.databases.values():
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
        self.databases.clear()

    # -- processes ------------------------------------------------------------------------

    def coordinator(self, name: str = "coordinator", **env: str) -> Proc:
        return self._define(name, ["-m", "coordinator", "worker"], {
            "SAGAFLOW_DSN": self.proc_dsn("coordinator"),
            "SAGAFLOW_KAFKA_BOOTSTRAP": self.proc_kafka,
            "SAGAFLOW_TOPIC_PREFIX": self.prefix,
            "SAGAFLOW_SAGAS": ",".join(self.sagas),
            "SAGAFLOW_GROUP_ID": f"{self.prefix}-coordinator",
            "SAGAFLOW_SHUTDOWN_GRACE": "PT3S",
            **env,
        })

    def relay(self, name: str = "relay", **env: str) -> Proc:
        return self._define(name, ["-m", "outbox_relay"], {
            "SAGAFLOW_RELAY_POSTGRES_DSN": self.proc_dsn("coordinator"),
            "SAGAFLOW_RELAY_KAFKA_BOOTSTRAP": self.proc_kafka,
            "SAGAFLOW_RELAY_RELAY_ID": f"{self.prefix}-{name}",
            "SAGAFLOW_RELAY_REBALANCE_INTERVAL": "0.3",
            "SAGAFLOW_RELAY_POLL_INTERVAL": "0.05",
            "SAGAFLOW_RELAY_PUBLISH_TIMEOUT": "10",
            "SAGAFLOW_RELAY_SHUTDOWN_TIMEOUT": "3",
            **env,
        })

    def participant(self, service: str, name: str | None = None, **env: str) -> Proc:
        return self._define(name or service, ["-m", f"examples.services.{service}"], {
            "SAGAFLOW_PARTICIPANT_DSN": self.proc_dsn(service),
            "SAGAFLOW_KAFKA_BOOTSTRAP": self.proc_kafka,
            "SAGAFLOW_TOPIC_PREFIX": self.prefix,
            "SAGAFLOW_PARTICIPANT_GROUP_ID": f"{self.prefix}-{service}",
            "SAGAFLOW_PARTICIPANT_DRAIN_TIMEOUT": "3",
            **env,
        })

    def _define(self, name: str, args: list[str], env: Mapping[str, str]) -> Proc:
        proc = self.procs.get(name)
        if proc is None:
            proc = Proc(name, [sys.executable, *args], dict(env), self.logs / f"{name}.log")
            self.procs[name] = proc
        else:
            proc.env.update(env)
        return proc

    def start(self, name: str, **env: str) -> Proc:
        """Start (or start again) the process called ``name`` with optional env overrides."""
        proc = self.procs[name]
        if proc.alive:
            raise RuntimeError(f"{name} is already running")
        proc.env.update(env)
        with open(proc.log, "ab") as log:
            log.write(f"\n===== start #{proc.starts + 1} of {name} =====\n".encode())
            log.flush()
            proc.popen = subprocess.Popen(
                proc.argv, cwd=ROOT, env={**os.environ, **proc.env},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.starts += 1
        return proc

    def start_default(self, *, coordinators: int = 1, relays: int = 1) -> None:
        """Define and start the whole stack: coordinators, relays and the three participants."""
        for i in range(coordinators):
            self.start(self.coordinator(f"coordinator-{i + 1}").name)
        for i in range(relays):
            self.start(self.relay(f"relay-{i + 1}").name)
        for service in SERVICES:
            self.start(self.participant(service).name)

    async def wait_ready(self, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Wait until every running process logged that it serves (so faults hit it mid-work,
        not mid-start: see the report on start-up crashes)."""
        marks = {"coordinator": "worker started", "relay": "live relays",
                 "payments": "consuming", "inventory": "consuming", "shipping": "consuming"}
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            mark = next(v for k, v in marks.items() if proc.name.startswith(k))
            while mark not in proc.log.read_text(errors="replace"):
                if not proc.alive or time.monotonic() > deadline:
                    raise RuntimeError(f"{proc.name} not ready:\n{self.log_tail(proc.name)}")
                await asyncio.sleep(0.2)

    def kill(self, name: str) -> bool:
        """SIGKILL the process ``name`` (it is ours: we started it, by pid). True if it ran."""
        proc = self.procs[name]
        if not proc.alive:
            return False
        assert proc.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGKILL)  # its own session: pid == pgid
        proc.popen.wait(10)
        proc.kills += 1
        return True

    async def wait_exit(self, name: str, timeout: float) -> int | None:  # noqa: ASYNC109
        """Wait for ``name`` to exit by itself; its exit code, or None if still running."""
        proc = self.procs[name]
        assert proc.popen is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = proc.popen.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.05)
        return None

    async def stop_all(self, grace: float = 8.0) -> dict[str, int | None]:
        """SIGTERM every running process, SIGKILL what outlives ``grace``; their exit codes."""
        running = [p for p in self.procs.values() if p.alive]
        for proc in running:
            assert proc.popen is not None
            with contextlib.suppress(ProcessLookupError):
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(p.alive for p in running) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        codes: dict[str, int | None] = {}
        for proc in running:
            if proc.alive:
                self.kill(proc.name)
            assert proc.popen is not None
            codes[proc.name] = proc.popen.poll()
        return codes

    def dead_processes(self) -> list[str]:
        """Processes that were started and exited without being killed by the test."""
        return [p.name for p in self.procs.values()
                if p.popen is not None and p.popen.poll() is not None]

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.procs[name].log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


async def fetch(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()
