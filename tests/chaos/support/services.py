"""A Postgres server and a Kafka broker owned by one scenario, so it may kill and restart them.

Both come from :mod:`devstack` with their own home folder and free ports; the shared services
other tests use are never touched. The Kafka broker advertises a port given by the caller (a
:class:`~tests.chaos.support.proxy.TcpProxy` in front of it), so every client connection goes
through that proxy. The blocking calls here must run in a thread (``asyncio.to_thread``) when a
proxy on the test's loop is in the path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

from devstack import procs
from devstack.config import HOST, Settings
from devstack.kafka import Kafka
from devstack.postgres import Postgres, find_bindir


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


class ProxiedKafka(Kafka):
    """A devstack broker whose advertised listener is another port (a proxy's)."""

    def __init__(self, settings: Settings, advertised_port: int) -> None:
        super().__init__(settings)
        self.advertised_port = advertised_port

    def _server_properties(self) -> str:
        text = super()._server_properties()
        mine = f"advertised.listeners=PLAINTEXT://{HOST}:{self.settings.kafka_port}"
        assert mine in text
        return text.replace(mine, f"advertised.listeners=PLAINTEXT://{HOST}:{self.advertised_port}")


class OwnedKafka:
    """Start, SIGKILL and restart a private broker (blocking calls)."""

    def __init__(self, home: Path, advertised_port: int) -> None:
        base = Settings.from_env()
        self.settings = Settings(home=home, cache=base.cache, kafka_port=free_port(),
                                 kafka_controller_port=free_port())
        self.service = ProxiedKafka(self.settings, advertised_port)

    @property
    def port(self) -> int:
        return self.settings.kafka_port

    def up(self) -> None:
        self.service.up()

    def kill(self) -> None:
        pid = self.service.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            procs.wait_until(lambda: not procs.pid_alive(pid), timeout=20, what="kafka kill")
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # our child: reap it
        procs.wait_until(
            lambda: not any(procs.port_open(p) for p in self.service.ports()),
            timeout=30, what="kafka ports released")

    def restart(self) -> None:
        self.kill()
        self.up()

    def down(self) -> None:
        with contextlib.suppress(Exception):
            self.service.down()
        shutil.rmtree(self.settings.home, ignore_errors=True)


class OwnedPostgres:
    """Start, crash (immediate stop) and restart a private Postgres server (blocking calls)."""

    def __init__(self) -> None:
        # The server runs as the postgres OS user: its home must be traversable by it.
        home = Path(tempfile.mkdtemp(prefix="sagaflow-chaos-pg-"))
        home.chmod(0o755)
        base = Settings.from_env()
        self.settings = Settings(home=home, cache=base.cache, pg_port=free_port())
        self.service = Postgres(self.settings)

    @property
    def port(self) -> int:
        return self.settings.pg_port

    @property
    def url(self) -> str:
        return self.settings.postgres_url

    def up(self) -> None:
        self.service.up()

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every backend dies at once, like a server crash."""
        user = "postgres" if os.geteuid() == 0 else None
        procs.run([str(find_bindir() / "pg_ctl"), "-D", str(self.service.data), "-m",
                   "immediate", "-w", "-t", "30", "stop"], user=user, timeout=60)

    def restart(self) -> None:
        self.crash()
        self.up()

    def down(self) -> None:
        with contextlib.suppress(Exception):
            self.service.down()
        shutil.rmtree(self.settings.home, ignore_errors=True)
