"""The whole saga stack as separate processes on fresh databases and fresh topics.

:class:`Stack` creates a coordinator database (migrated) and one database per participant,
pre-creates the topics of a unique prefix, starts every process in its own process group,
and kills them all and drops the databases on exit, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.sagas import ABSENT
from coordinator.migrations import migrate
from participant_sdk.protocol import command_topic, reply_topic

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
PARTITIONS = 4
_TICK = os.sysconf("SC_CLK_TCK")

#: The participant processes: ``python -m bench.participants NAME`` (the example services
#: plus the bench sagas' extra actions).
PARTICIPANT_MODULES = ("payments", "inventory", "shipping")


async def delete_prefixed_topics(bootstrap: str, prefix: str) -> None:
    """Delete the topics named ``{prefix}.*`` (those the stack made, and those its processes
    created on first use, such as the signals topic)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(f"{prefix}.")]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dsn_for(base: str, database: str, socket_dir: str = "") -> str:
    """``base`` with its database replaced; with ``socket_dir``, through the server's
    Unix-domain socket in that folder instead of TCP (same port: it names the socket file)."""
    url = urlsplit(base)
    if not socket_dir:
        return urlunsplit(url._replace(path="/" + database))
    query = urlencode({"host": socket_dir, "port": url.port or 5432})
    user = url.netloc.rsplit("@", 1)[0] + "@" if "@" in url.netloc else ""
    return f"{url.scheme}://{user}/{database}?{query}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc/<pid>/stat (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def main_thread_cpu_seconds(pid: int) -> float:
    """CPU time of the process's main thread at nanosecond resolution (/proc/<pid>/schedstat):
    the whole CPU of a single-threaded process such as a Postgres backend."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def run_delay_seconds(pid: int) -> float:
    """Time the process spent runnable but waiting for a CPU (/proc/<pid>/schedstat)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches so far (/proc/<pid>/status): wake-ups."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in text.splitlines()
               if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")))


#: The broker's key in the per-saga CPU figures (a process of the stack, shared by variants).
KAFKA_BROKER = "kafka broker"


def broker_pid(bootstrap: str) -> int | None:
    """The pid of the local Kafka broker of ``bootstrap`` (its first address)."""
    return listener_pid(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))


def listener_pid(port: int) -> int | None:
    """The pid of the local process listening on TCP ``port``, from /proc/net/tcp{,6} and
    the processes' socket fds; None if it is not visible here."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    targets = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in targets:
                        return int(proc.name)
    return None


def proc_status_kb(pid: int, key: str) -> int:
    """A ``kB`` field (VmRSS, VmHWM) of /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid


@dataclass
class Stack:
    """One stack: ``async with Stack(...) as stack`` sets up, starts and always tears down."""

    admin_dsn: str
    kafka: str
    sagas: list[str]
    label: str
    coordinators: int = 1
    relays: int = 1
    #: Run the operator API too (idle, it is part of the stack's quiet figure).
    api: bool = True
    #: The bench's driver publishes each saga's first command itself, as the API does
    #: (off: through a relay, as before the API did).
    driver_publishes: bool = True
    participants: tuple[str, ...] = ("payments", "inventory", "shipping")
    profile_dir: Path | None = None
    #: Checkout whose code the stack's processes run (default: this one). The bench's own
    #: driver always runs this checkout's code; ``--compare`` uses it for before/after runs.
    repo: Path = REPO
    #: Extra environment for every process of the stack (settings A/B).
    env: dict[str, str] = field(default_factory=dict)
    #: Connect the stack's processes and the driver to Postgres through its Unix-domain
    #: socket in this folder instead of loopback TCP (the admin connection stays on TCP).
    pg_socket_dir: str = ""
    #: Count every Kafka request of each process by type (``bench/kafka_requests.py``).
    count_kafka: bool = False
    #: Participants serve the direct lane and the coordinators (and the driver) hand their
    #: commands over on it, Kafka being the recovery path (:mod:`participant_sdk.direct`).
    direct: bool = False
    direct_endpoints: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    procs: list[Proc] = field(default_factory=list)
    prefix: str = ""
    coordinator_dsn: str = ""
    participant_dsns: dict[str, str] = field(default_factory=dict)
    _broker_pid: int | None = None

    @property
    def databases(self) -> dict[str, str]:
        """Role -> database name of every database this stack owns."""
        names = {"coordinator": f"bench_{self.run_id}_coord"}
        names.update({p: f"bench_{self.run_id}_{p}" for p in self.participants})
        return names

    @property
    def topics(self) -> list[str]:
        names = [command_topic(p, self.prefix) for p in (*PARTICIPANT_MODULES, ABSENT)]
        return [*names, reply_topic(self.prefix)]

    async def __aenter__(self) -> Stack:
        try:
            await self._setup()
            self._start()
        except BaseException:
            await self._teardown()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._teardown()

    # -- setup ---------------------------------------------------------------------------

    async def _setup(self) -> None:
        self.prefix = f"bench{self.run_id}"
        if self.direct:
            self.direct_endpoints = {p: f"127.0.0.1:{free_port()}" for p in self.participants}
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            for name in self.databases.values():
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        self.coordinator_dsn = dsn_for(
            self.admin_dsn, self.databases["coordinator"], self.pg_socket_dir)
        self.participant_dsns = {
            p: dsn_for(self.admin_dsn, self.databases[p], self.pg_socket_dir)
            for p in self.participants
        }
        conn = await asyncpg.connect(self.coordinator_dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await self._count_statements()
        kafka_admin = AIOKafkaAdminClient(bootstrap_servers=self.kafka)
        await kafka_admin.start()
        try:
            await kafka_admin.create_topics(
                [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in self.topics]
            )
        finally:
            await kafka_admin.close()

    def _commands(self) -> list[tuple[str, list[str], dict[str, str]]]:
        common = {"SAGAFLOW_KAFKA_BOOTSTRAP": self.kafka, "SAGAFLOW_TOPIC_PREFIX": self.prefix,
                  "SAGAFLOW_LOG_LEVEL": "WARNING"}
        if self.direct:
            common["SAGAFLOW_DIRECT_ENDPOINTS"] = ",".join(
                f"{p}={a}" for p, a in self.direct_endpoints.items())
        out: list[tuple[str, list[str], dict[str, str]]] = []
        for i in range(self.coordinators):
            out.append((f"coordinator{i + 1}", ["-m", "coordinator", "worker"],
                        {**common, "SAGAFLOW_DSN": self.coordinator_dsn,
                         "SAGAFLOW_SAGAS": ",".join(self.sagas),
                         "SAGAFLOW_GROUP_ID": self.coordinator_group}))
        for i in range(self.relays):
            out.append((f"relay{i + 1}", ["-m", "outbox_relay"],
                        {"SAGAFLOW_RELAY_POSTGRES_DSN": self.coordinator_dsn,
                         "SAGAFLOW_RELAY_KAFKA_BOOTSTRAP": self.kafka,
                         "SAGAFLOW_RELAY_RELAY_ID": f"bench-relay{i + 1}",
                         "SAGAFLOW_LOG_LEVEL": "WARNING"}))
        if self.api:
            out.append(("api", ["-m", "coordinator", "api"],
                        {**common, "SAGAFLOW_DSN": self.coordinator_dsn,
                         "SAGAFLOW_SAGAS": ",".join(self.sagas),
                         "SAGAFLOW_API_PORT": str(free_port()),
                         "SAGAFLOW_API_TOKENS": f"bench:operator:{uuid.uuid4().hex}"}))
        for p in self.participants:
            extra = ({"SAGAFLOW_PARTICIPANT_DIRECT_LISTEN": self.direct_endpoints[p]}
                     if self.direct else {})
            out.append((p, ["-m", "bench.participants", p],
                        {**common, "SAGAFLOW_PARTICIPANT_DSN": self.participant_dsns[p],
                         **extra}))
        return out

    def _start(self) -> None:
        logs = RESULTS / "logs" / f"{self.label}-{self.run_id}"
        logs.mkdir(parents=True, exist_ok=True)
        for name, argv, env in self._commands():
            if self.count_kafka:
                argv = [str(REPO / "bench" / "kafka_requests.py"),
                        str(logs / f"{name}.kafka-requests.json"), *argv[1:]]
            if self.profile_dir is not None:
                self.profile_dir.mkdir(parents=True, exist_ok=True)
                argv = ["-m", "cProfile", "-o", str(self.profile_dir / f"{name}.prof"), *argv]
            path = logs / f"{name}.log"
            with open(path, "wb") as log:
                popen = subprocess.Popen(
                    [sys.executable, *argv], cwd=self.repo, stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONPATH": str(self.repo), **env, **self.env},
                    start_new_session=True,
                )
            self.procs.append(Proc(name, popen, path))

    # -- teardown ------------------------------------------------------------------------

    def stop_processes(self, names: set[str] | None = None, grace: float = 15.0) -> None:
        """SIGTERM each process group, wait within ``grace``, then SIGKILL what is left."""
        chosen = [p for p in self.procs if names is None or p.name in names]
        for proc in chosen:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in chosen:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait()
            # Children of the group (none expected) go too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    async def _teardown(self) -> None:
        try:
            self.stop_processes()
        finally:
            with contextlib.suppress(Exception):
                admin = await asyncpg.connect(self.admin_dsn)
                try:
                    for name in self.databases.values():
                        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                finally:
                    await admin.close()
            with contextlib.suppress(Exception):
                await delete_prefixed_topics(self.kafka, self.prefix)

    # -- observation ---------------------------------------------------------------------

    def check_alive(self) -> None:
        for proc in self.procs:
            code = proc.popen.poll()
            if code is not None:
                tail = proc.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{proc.name} exited with {code}; log tail:\n{tail}")

    def proc(self, name: str) -> Proc:
        return next(p for p in self.procs if p.name == name)

    def cpu(self) -> dict[str, float]:
        return {p.name: cpu_seconds(p.pid) for p in self.procs}

    def kafka_requests(self) -> dict[str, dict[str, int]] | None:
        """Kafka requests sent so far by each process, by type (None unless ``count_kafka``)."""
        if not self.count_kafka:
            return None
        from bench.kafka_requests import read_counts

        return {p.name: read_counts(str(p.log.with_suffix(".kafka-requests.json")))
                for p in self.procs}

    def broker_cpu(self) -> float | None:
        """CPU seconds of the Kafka broker this stack uses (shared by the variants, so only
        a window with one stack at work is its), or None when it is not a local process."""
        if self._broker_pid is None:
            self._broker_pid = broker_pid(self.kafka) or 0
        return cpu_seconds(self._broker_pid) if self._broker_pid else None

    def run_delay(self) -> dict[str, float]:
        return {p.name: run_delay_seconds(p.pid) for p in self.procs}

    def wakeups(self) -> dict[str, int]:
        return {p.name: context_switches(p.pid) for p in self.procs}

    async def _per_role(self, query: str) -> dict[str, int]:
        """``query`` (rows of database name and count, for the names in ``$1``) per role."""
        names = self.databases
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            rows = await conn.fetch(query, list(names.values()))
        finally:
            await conn.close()
        by_name = {r[0]: int(r[1]) for r in rows}
        return {role: by_name.get(db, 0) for role, db in names.items()}

    async def transactions(self) -> dict[str, int]:
        """pg_stat_database commits + rollbacks per role (read-only ones count too)."""
        return await self._per_role(
            "SELECT datname, xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = ANY($1)")

    async def _count_statements(self) -> None:
        """Have pg_stat_statements count this stack's statements (devstack loads it with
        tracking off); on a server without it :meth:`round_trips` returns None."""
        admin = await asyncpg.connect(self.admin_dsn)
        try:
            with contextlib.suppress(asyncpg.PostgresError):
                await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                for name in self.databases.values():
                    await admin.execute(
                        f'ALTER DATABASE "{name}" SET pg_stat_statements.track = top')
        finally:
            await admin.close()

    async def round_trips(self) -> dict[str, int] | None:
        """Statements executed so far per role (BEGIN and COMMIT included: each is a round
        trip), from pg_stat_statements; None when the server does not load it."""
        try:
            return await self._per_role(
                "SELECT d.datname, sum(s.calls)::bigint FROM pg_stat_statements s"
                " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = ANY($1)"
                " GROUP BY d.datname")
        except asyncpg.PostgresError:
            return None

    async def vacuum(self) -> None:
        """``VACUUM ANALYZE`` every database of this stack, so that the autovacuum a busy
        measurement left due does not run during the next one."""
        for database in self.databases.values():
            conn = await asyncpg.connect(dsn_for(self.admin_dsn, database))
            try:
                await conn.execute("VACUUM ANALYZE")
            finally:
                await conn.close()

    async def xacts(self) -> dict[str, int]:
        """pg_stat_database commits per role of this stack's databases."""
        return await self._per_role(
            "SELECT datname, xact_commit FROM pg_stat_database WHERE datname = ANY($1)")

    async def backend_cpu(self, exclude: set[int] | None = None) -> dict[int, float]:
        """CPU seconds of every Postgres backend connected to this stack's databases."""
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = ANY($1)",
                                    list(self.databases.values()))
        finally:
            await conn.close()
        return {r["pid"]: cpu_seconds(r["pid"]) for r in rows
                if r["pid"] not in (exclude or set())}

    @property
    def coordinator_group(self) -> str:
        return f"sagaflow-coordinator-{self.run_id}"

    async def coordinators_joined(self, limit_s: float = 60) -> None:
        """Wait until every coordinator holds partitions in one settled consumer group.

        A warm-up can finish on the first coordinator alone; the others joining later would
        rebalance the group (seconds without replies) inside the measured window.
        """
        admin = AIOKafkaAdminClient(bootstrap_servers=self.kafka)
        await admin.start()

        async def settled() -> bool:
            (response,) = await admin.describe_consumer_groups([self.coordinator_group])
            group = response.to_object()["groups"][0]
            members = group["members"]
            return (group["state"] == "Stable" and len(members) == self.coordinators
                    and all(m["member_assignment"] for m in members))

        try:
            await wait_for(settled, limit_s, f"{self.coordinators} coordinators in the group")
        finally:
            await admin.close()

    async def kafka_messages(self) -> dict[str, int]:
        """Messages written so far to each topic of this stack (end offsets; topics are new)."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.kafka)
        await consumer.start()
        try:
            parts = [TopicPartition(t, p) for t in self.topics for p in range(PARTITIONS)]
            ends = await consumer.end_offsets(parts)
        finally:
            await consumer.stop()
        out: dict[str, int] = {}
        for tp, offset in ends.items():
            out[tp.topic] = out.get(tp.topic, 0) + offset
        return out


async def wait_for(predicate: Any, limit_s: float, what: str, interval: float = 0.5) -> None:
    """Await ``predicate()`` until it returns true, or raise after ``limit_s`` seconds."""
    deadline = time.monotonic() + limit_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {limit_s:.0f}s waiting for {what}")
        await asyncio.sleep(interval)
