"""A local Postgres server from the machine's binaries (or the ``pgserver`` wheel's)."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
from pathlib import Path

from devstack import procs
from devstack.config import HOST
from devstack.errors import ServiceError
from devstack.service import Service

OS_USER = "postgres"  # Postgres refuses to run as root
#: A realistic server for a million sagas (docs/running-in-production.md): shared_buffers that hold
#: the indexes a burst of changes touches (with 256MB: 2.7x the block reads of 1GB and
#: 357,000 dirty pages written by the backends themselves for 100,000 fired timers), and
#: enough WAL between checkpoints that such a burst triggers none (1GB: three in 25 s, each
#: restarting the full-page images).
SETTINGS = {"max_connections": "300", "shared_buffers": "1GB", "max_wal_size": "8GB",
            "checkpoint_timeout": "15min"}


def statement_counting() -> dict[str, str]:
    """pg_stat_statements loaded but tracking nothing, when the server has it: the bench turns
    it on for its own databases to count an idle stack's round trips (``bench/latency.py``)."""
    if not (find_bindir().parent / "lib" / "pg_stat_statements.so").exists():
        return {}
    return {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "none"}


def find_bindir() -> Path:
    """Directory holding initdb and pg_ctl: $SAGAFLOW_PG_BINDIR, pg_config, Debian, pgserver."""
    candidates: list[Path] = []
    if env := os.environ.get("SAGAFLOW_PG_BINDIR"):
        candidates.append(Path(env))
    if pg_config := shutil.which("pg_config"):
        try:
            candidates.append(Path(procs.run([pg_config, "--bindir"], timeout=10).strip()))
        except ServiceError:
            pass
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted((Path(d) for d in debian), key=_major, reverse=True)
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise ServiceError(
        "no Postgres server binaries found (initdb, pg_ctl): install postgresql-15 "
        "(apt-get install postgresql-15), `pip install pgserver`, or set SAGAFLOW_PG_BINDIR"
    )


def _major(bindir: Path) -> int:
    try:
        return int(bindir.parent.name)
    except ValueError:
        return 0


class Postgres(Service):
    name = "postgres"
    start_timeout = 60.0

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def address(self) -> str:
        return self.settings.postgres_url

    @property
    def log_file(self) -> Path:
        return self.dir / "log"

    def ports(self) -> list[int]:
        return [self.settings.pg_port]

    def pid(self) -> int | None:
        return procs.pid_running(self.data / "postmaster.pid", str(self.data))

    def healthy(self) -> bool:
        try:
            procs.run(
                [
                    str(find_bindir() / "pg_isready"),
                    "-q",
                    "-h",
                    HOST,
                    "-p",
                    str(self.settings.pg_port),
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-t",
                    "2",
                ],
                timeout=10,
            )
        except ServiceError:
            return False
        return True

    def _user(self) -> str | None:
        return OS_USER if os.geteuid() == 0 else None

    def install(self) -> None:
        if (self.data / "PG_VERSION").is_file():
            return
        user = self._prepare_dir()
        procs.run(
            [
                str(find_bindir() / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ],
            user=user,
            timeout=300,
        )

    def _prepare_dir(self) -> str | None:
        """Create the server's folder, owned by the OS user it runs as (returned; None when
        it runs as the caller)."""
        user = self._user()
        self.dir.mkdir(parents=True, exist_ok=True)
        if user is not None:
            procs.ensure_os_user(user)
            procs.chown_tree(self.dir, user)
            self._check_reachable(user)
        return user

    def _check_reachable(self, user: str) -> None:
        try:
            procs.run(["test", "-w", str(self.dir)], user=user, timeout=10)
        except ServiceError:
            raise ServiceError(
                f"user {user!r} cannot write {self.dir} (a parent folder is not traversable); "
                "set SAGAFLOW_DEVSTACK_HOME to a folder it can reach"
            ) from None

    def server_settings(self) -> dict[str, str]:
        """The ``-c`` settings the server starts with (the HA pair adds replication's)."""
        return {**SETTINGS, **statement_counting()}

    def start(self) -> None:
        options = " ".join(
            [
                f"-c listen_addresses={HOST}",
                f"-p {self.settings.pg_port}",
                f"-c unix_socket_directories={self.dir}",
                *(f"-c {k}={v}" for k, v in self.server_settings().items()),
            ]
        )
        user = self._user()
        if user is not None:
            procs.chown_tree(self.dir, user)
        procs.run(
            [
                str(find_bindir() / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log_file),
                "-o",
                options,
                "-w",
                "-t",
                str(int(self.start_timeout)),
                "start",
            ],
            user=user,
            timeout=self.start_timeout + 10,
            new_session=True,
        )

    def stop(self, pid: int) -> None:
        procs.run(
            [
                str(find_bindir() / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                "fast",
                "-w",
                "-t",
                "60",
                "stop",
            ],
            user=self._user(),
            timeout=90,
        )
