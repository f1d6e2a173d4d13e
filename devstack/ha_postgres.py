"""A Postgres primary with one synchronous streaming standby (``pg_basebackup``), loopback only.

Every commit on the primary waits until the standby has flushed its WAL
(``synchronous_standby_names`` + ``synchronous_commit=on``), so a commit a client saw succeed
is on both servers. :meth:`PostgresPair.promote` turns the standby into the primary after the
primary is lost (``pg_ctl promote``); the promoted server then runs alone, not synchronous,
until a new standby is attached (commits must not hang on a standby that is gone).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from devstack import procs
from devstack.config import HOST, Settings
from devstack.errors import ServiceError
from devstack.ha_config import HaSettings
from devstack.postgres import Postgres, find_bindir
from devstack.service import State, Status

STANDBY_NAME = "sagaflow_standby"  # the standby's cluster_name, so its application_name
log = logging.getLogger(__name__)


class PostgresPrimary(Postgres):
    """The primary: every commit waits for the standby named :data:`STANDBY_NAME`."""

    name = "postgres-primary"

    def server_settings(self) -> dict[str, str]:
        return {
            **super().server_settings(),
            "wal_level": "replica",
            "synchronous_standby_names": STANDBY_NAME,
            "synchronous_commit": "on",
            "wal_keep_size": "512MB",  # a standby that lags a little catches up without a slot
        }


class PostgresStandby(Postgres):
    """A hot standby cloned from the primary, streaming from it."""

    name = "postgres-standby"

    def __init__(self, settings: Settings, primary_port: int) -> None:
        super().__init__(settings)
        self.primary_port = primary_port

    def server_settings(self) -> dict[str, str]:
        return {**super().server_settings(), "cluster_name": STANDBY_NAME, "hot_standby": "on"}

    def install(self) -> None:
        if (self.data / "PG_VERSION").is_file():
            return
        user = self._prepare_dir()
        log.info("cloning the standby from %s:%d", HOST, self.primary_port)
        procs.run(
            [
                str(find_bindir() / "pg_basebackup"),
                "-h", HOST, "-p", str(self.primary_port), "-U", "postgres",
                "-D", str(self.data), "-X", "stream", "-R", "--checkpoint=fast", "-w",
            ],
            user=user,
            timeout=300,
        )

    def promote(self) -> None:
        """``pg_ctl promote``: end recovery, accept writes (waits until it does)."""
        procs.run(
            [str(find_bindir() / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote"],
            user=self._user(),
            timeout=90,
        )


@dataclass(frozen=True)
class Replication:
    """What the primary's ``pg_stat_replication`` says about the standby."""

    state: str  # e.g. "streaming"; "" when the standby is not connected
    sync_state: str  # "sync" when commits wait for it

    @property
    def synchronous(self) -> bool:
        return self.state == "streaming" and self.sync_state == "sync"


class PostgresPair:
    """The primary and its synchronous standby, started, checked and stopped as one."""

    name = "postgres-ha"

    def __init__(self, settings: HaSettings) -> None:
        self.settings = settings
        self.primary = PostgresPrimary(settings.base)
        self.standby = PostgresStandby(settings.standby, primary_port=settings.base.pg_port)

    @property
    def address(self) -> str:
        return self.settings.postgres_url

    def replication(self) -> Replication:
        out = procs.run(
            [
                str(find_bindir() / "psql"), "-h", HOST, "-p", str(self.settings.base.pg_port),
                "-U", "postgres", "-d", "postgres", "-X", "-A", "-t", "-F", " ", "-c",
                "SELECT application_name, state, sync_state FROM pg_stat_replication",
            ],
            timeout=15,
        )
        for line in out.splitlines():
            name, *rest = line.split()
            if name == STANDBY_NAME and len(rest) == 2:
                return Replication(*rest)
        return Replication("", "")

    def synchronous(self) -> bool:
        try:
            return self.replication().synchronous
        except ServiceError:
            return False

    def status(self) -> Status:
        p, s = self.primary.status(), self.standby.status()
        state = State.RUNNING if p.usable and s.usable and self.synchronous() else (
            State.STOPPED if p.state is s.state is State.STOPPED else State.UNHEALTHY)
        return Status(name=self.name, state=state, address=self.address, pid=p.pid,
                      log_file=p.log_file)

    def up(self) -> Status:
        """Start the primary, clone and start the standby, wait until commits are synchronous."""
        self.primary.up()
        self.standby.up()
        procs.wait_until(self.synchronous, timeout=60, what="synchronous standby",
                         alive=lambda: self.standby.pid() is not None,
                         log_file=self.standby.log_file)
        return self.status()

    def down(self) -> Status:
        self.standby.down()
        self.primary.down()
        return self.status()

    def promote(self) -> None:
        self.standby.promote()
