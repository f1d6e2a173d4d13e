"""Postgres over TLS: a test-owned server that refuses plain connections, and every component's
database code given a DSN with ``sslmode=verify-full``: the coordinator's store, the relay's
connection and outbox, the participant SDK's pool. A server the CA does not vouch for is
refused, and the worker says so in one line."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from coordinator.migrations import migrate
from devstack.config import Settings
from devstack.postgres import Postgres
from outbox_relay import OutboxMessage, enqueue, install
from participant_sdk.pools import create_pool
from tests.integration.secure_kafka import _free_port, certificates
from tests.integration.test_store_support import make_registry

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

_HBA = """\
local     all all              trust
hostnossl all all 127.0.0.1/32 reject
hostssl   all all 127.0.0.1/32 trust
"""


class TlsPostgres(Postgres):
    """devstack's Postgres with TLS on and plain TCP refused."""

    def install(self) -> None:
        fresh = not (self.data / "PG_VERSION").is_file()
        super().install()
        if fresh:
            certificates(self.dir)
            (self.dir / "server.key").chmod(0o600)
            (self.data / "pg_hba.conf").write_text(_HBA)

    def server_settings(self) -> dict[str, str]:
        return {**super().server_settings(), "shared_buffers": "32MB", "ssl": "on",
                "ssl_cert_file": str(self.dir / "server.crt"),
                "ssl_key_file": str(self.dir / "server.key")}


@pytest.fixture(scope="module")
def tls_server() -> Iterator[TlsPostgres]:
    # Not pytest's tmp_path: the server runs as another user, who cannot enter it.
    home = Path(tempfile.mkdtemp(prefix="sagaflow-pg-tls-"))
    home.chmod(0o755)
    settings = Settings.from_env({"SAGAFLOW_DEVSTACK_HOME": str(home),
                                  "SAGAFLOW_PG_PORT": str(_free_port())})
    server = TlsPostgres(settings)
    server.up()
    try:
        yield server
    finally:
        server.down()
        shutil.rmtree(home, ignore_errors=True)


def _dsn(server: TlsPostgres, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return f"postgresql://postgres@127.0.0.1:{server.settings.pg_port}/postgres?{params}"


def _verified(server: TlsPostgres) -> str:
    return _dsn(server, sslmode="verify-full", sslrootcert=str(server.dir / "ca.pem"))


async def _on_tls(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"))


async def test_plain_connections_are_refused(tls_server: TlsPostgres) -> None:
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
        await asyncpg.connect(_dsn(tls_server, sslmode="disable"))


async def test_every_component_connects_over_verified_tls(tls_server: TlsPostgres) -> None:
    from coordinator.store import SagaStore

    dsn = _verified(tls_server)
    conn = await asyncpg.connect(dsn)  # the relay's own connection is this call
    try:
        assert await _on_tls(conn)
        await migrate(conn)
        await install(conn)
        async with conn.transaction():
            await enqueue(conn, [OutboxMessage(topic="tls.events", key="k", payload=b"{}",
                                               message_id=uuid.uuid4())])
    finally:
        await conn.close()
    async with await SagaStore.open(dsn, make_registry("tls"), max_size=2) as store:
        started = await store.start_saga("tcc_order", {"order_id": "o-1", "amount": 10})
        assert started.created
        async with store.pool.acquire() as c:
            assert await _on_tls(c)
    pool = await create_pool(dsn, min_size=1, max_size=1)  # the participant SDK's pool
    try:
        async with pool.acquire() as c:
            assert await _on_tls(c)
            assert await c.fetchval("SELECT count(*) FROM sagaflow_outbox") >= 2
    finally:
        await pool.close()


def _untrusted(server: TlsPostgres, work: Path) -> str:
    other_ca, _ = certificates(work)  # a CA that never signed the server's certificate
    return _dsn(server, sslmode="verify-full", sslrootcert=str(other_ca))


async def test_a_server_the_ca_does_not_vouch_for_is_refused(
    tls_server: TlsPostgres, tmp_path: Path
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncpg.connect(_untrusted(tls_server, tmp_path))


def test_the_worker_says_so_in_one_line(tls_server: TlsPostgres, tmp_path: Path) -> None:
    """A certificate that does not verify is a misconfiguration: no retrying for minutes."""
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator", "worker", "--saga",
         "tests.integration.test_store_support:TccOrder"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "SAGAFLOW_DSN": _untrusted(tls_server, tmp_path),
             "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 3, proc.stderr[-2000:]  # ExitCode.POSTGRES
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("sagaflow-coordinator: error: TLS: the server's certificate does "
                           "not verify"), proc.stderr[-2000:]
    assert "sslrootcert in SAGAFLOW_DSN" in last
