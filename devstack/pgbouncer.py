"""PgBouncer in transaction mode in front of the local Postgres (Debian package ``pgbouncer``).

Function instances scale out to many small pools; PgBouncer bounds the server connections
they add up to. Transaction pooling hands a server connection to a client for one transaction
only, so nothing session-scoped survives between transactions: this is the path the function
entry points are tested through. ``SAGAFLOW_PGBOUNCER_PORT`` picks the port (default 56432).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from devstack import procs
from devstack.config import HOST, Settings
from devstack.errors import ServiceError
from devstack.service import Service

ENV_PORT = "SAGAFLOW_PGBOUNCER_PORT"
DEFAULT_PORT = 56432
OS_USER = "postgres"  # PgBouncer refuses to run as root

CONFIG = """\
[databases]
* = host={host} port={pg_port}

[pgbouncer]
listen_addr = {host}
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = transaction
default_pool_size = 10
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
logfile = {log_file}
pidfile = {pid_file}
"""


def pgbouncer_port(env: dict[str, str] | None = None) -> int:
    value = (os.environ if env is None else env).get(ENV_PORT)
    if not value:
        return DEFAULT_PORT
    try:
        return int(value)
    except ValueError:
        raise ServiceError(f"{ENV_PORT}={value!r} is not a port number") from None


class Pgbouncer(Service):
    name = "pgbouncer"
    start_timeout = 30.0

    def __init__(self, settings: Settings, *, port: int | None = None) -> None:
        super().__init__(settings)
        self.port = port if port is not None else pgbouncer_port()

    @property
    def url(self) -> str:
        """The DSN of the ``postgres`` database through PgBouncer."""
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    @property
    def address(self) -> str:
        return f"{self.url} (transaction pooling -> :{self.settings.pg_port})"

    @property
    def log_file(self) -> Path:
        return self.dir / "pgbouncer.log"

    @property
    def config(self) -> Path:
        return self.dir / "pgbouncer.ini"

    def ports(self) -> list[int]:
        return [self.port]

    def pid(self) -> int | None:
        return procs.pid_running(self.dir / "pgbouncer.pid", str(self.config))

    def healthy(self) -> bool:
        return procs.port_open(self.port) and procs.port_open(self.settings.pg_port)

    def installed(self) -> bool:
        return self._find() is not None

    def _find(self) -> str | None:
        return os.environ.get("SAGAFLOW_PGBOUNCER_BIN") or shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").is_file() else None)

    def binary(self) -> str:
        found = self._find()
        if found is None:
            raise ServiceError("pgbouncer not found: apt-get install pgbouncer "
                               "(or set SAGAFLOW_PGBOUNCER_BIN)")
        return found

    def _user(self) -> str | None:
        return OS_USER if os.geteuid() == 0 else None

    def install(self) -> None:
        self.binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        auth_file = self.dir / "users.txt"
        auth_file.write_text('"postgres" ""\n')
        self.config.write_text(CONFIG.format(
            host=HOST, port=self.port, pg_port=self.settings.pg_port, auth_file=auth_file,
            log_file=self.log_file, pid_file=self.dir / "pgbouncer.pid"))
        user = self._user()
        if user is not None:
            procs.ensure_os_user(user)
            procs.chown_tree(self.dir, user)

    def start(self) -> None:
        # -d daemonises and writes the pid file itself (as the unprivileged user).
        user = self._user()
        argv = [self.binary(), "-d", *(["-u", user] if user else []), str(self.config)]
        procs.run(argv, timeout=30, cwd=self.dir)

    def stop(self, pid: int) -> None:
        # Daemonised, it leads no process group of its own: signal the pid itself.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if not procs.pid_alive(pid):
                    return
                time.sleep(0.1)
        raise ServiceError(f"pgbouncer pid {pid} survived SIGKILL")
