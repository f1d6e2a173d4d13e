"""A small launcher for the example stack, shared by demos and end-to-end tests.

The coordinator worker, the relay and each example service run as their own
process (own process group, log file per process); :func:`processes` stops them with SIGTERM
(then SIGKILL after a bound) so they flush their telemetry on the way out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import asyncpg

__all__ = ["CARRIERS", "CHECKOUT_SAGA", "DECLARED", "SAGA", "SAGAS", "SERVICES", "Command",
           "fresh_database", "processes", "saga_specs", "service_argv", "stack_commands"]

SAGA = "examples.order_saga:OrderSaga"
CHECKOUT_SAGA = "examples.checkout_saga:CheckoutSaga"
#: Every example saga type: the coordinator and the API load them all.
SAGAS = (SAGA, CHECKOUT_SAGA, "examples.order_saga:NestedOrderSaga",
         "examples.order_saga:FulfilmentSaga")
#: The same order and checkout sagas declared as data (YAML), loadable in place of the classes.
DECLARED = {SAGA: str(Path(__file__).parent / "order_saga.yaml"),
            CHECKOUT_SAGA: str(Path(__file__).parent / "checkout_saga.yaml")}
#: The order saga's services.
SERVICES = ("payments", "inventory", "shipping")
#: The checkout saga's two carriers (it also uses payments and inventory).
CARRIERS = ("carrier_a", "carrier_b")

#: argv and extra environment of one process.
Command = tuple[list[str], dict[str, str]]


def dsn_for(base: str, database: str) -> str:
    """``base`` with another database; its query (``target_session_attrs``) is kept."""
    server, sep, query = base.partition("?")
    return server.rsplit("/", 1)[0] + "/" + database + sep + query


async def fresh_database(admin_dsn: str, name: str) -> str:
    """Drop and create database ``name``; return its DSN."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return dsn_for(admin_dsn, name)


async def drop_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def saga_specs(definitions: str = "classes") -> tuple[str, ...]:
    """Every example saga type, the order and checkout sagas as their classes or as YAML."""
    if definitions not in ("classes", "yaml"):
        raise ValueError(f"definitions must be 'classes' or 'yaml', not {definitions!r}")
    return SAGAS if definitions == "classes" else tuple(DECLARED.get(s, s) for s in SAGAS)


def service_argv(name: str) -> list[str]:
    """The argv (after the interpreter) of example service ``name``."""
    if name in CARRIERS:
        return ["-m", "examples.services.carriers", name]
    return ["-m", f"examples.services.{name}"]


def stack_commands(
    *,
    coordinator_dsn: str,
    service_dsns: Mapping[str, str],
    kafka: str,
    topic_prefix: str,
    env: Mapping[str, str] | None = None,
    per_process_env: Mapping[str, Mapping[str, str]] | None = None,
    sagas: tuple[str, ...] = SAGAS,
) -> dict[str, Command]:
    """The commands of the whole stack: ``coordinator``, ``relay`` and one per service."""
    py = sys.executable
    extra = dict(env or {})
    own = per_process_env or {}
    common = {**extra, "SAGAFLOW_KAFKA_BOOTSTRAP": kafka, "SAGAFLOW_TOPIC_PREFIX": topic_prefix}
    commands: dict[str, Command] = {
        "coordinator": ([py, "-m", "coordinator", "worker"],
                        {**common, "SAGAFLOW_DSN": coordinator_dsn,
                         "SAGAFLOW_SAGAS": ",".join(sagas)}),
        "relay": ([py, "-m", "outbox_relay"],
                  {**extra, "SAGAFLOW_RELAY_POSTGRES_DSN": coordinator_dsn,
                   "SAGAFLOW_RELAY_KAFKA_BOOTSTRAP": kafka}),
    }
    for name, dsn in service_dsns.items():
        commands[name] = ([py, *service_argv(name)],
                          {**common, "SAGAFLOW_PARTICIPANT_DSN": dsn})
    for name, env_of in own.items():
        commands[name][1].update(env_of)
    return commands


@contextmanager
def processes(
    commands: Mapping[str, Command], logs: Path, *, grace: float = 15.0, quiet: bool = False
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Run each command as its own process group; SIGTERM them all on exit."""
    logs.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, (argv, env) in commands.items():
            with open(logs / f"{name}.log", "wb") as log:
                procs[name] = subprocess.Popen(
                    argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            if not quiet:
                print(f"  started {name:<11} pid {procs[name].pid}  log {logs / (name + '.log')}")
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for name, proc in procs.items():
            try:
                code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if not quiet:
                print(f"  stopped {name:<11} exit {code}")
