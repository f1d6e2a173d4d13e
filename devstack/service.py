"""The shape every local service shares: status, idempotent up, and down."""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from devstack import procs
from devstack.config import Settings
from devstack.errors import ServiceError

log = logging.getLogger(__name__)


class State(StrEnum):
    STOPPED = "stopped"
    RUNNING = "running"
    UNHEALTHY = "unhealthy"  # our process is alive but does not answer yet
    EXTERNAL = "external"  # healthy, but served by a process devstack did not start here
    PORT_BUSY = "port-busy"  # not ours, not healthy, yet a port is taken
    BUILDING = "building"  # being built in the background; its port already takes requests


@dataclass(frozen=True, kw_only=True)
class Status:
    name: str
    state: State
    address: str
    pid: int | None = None
    log_file: Path | None = None

    @property
    def usable(self) -> bool:
        return self.state in (State.RUNNING, State.EXTERNAL)

    def line(self) -> str:
        pid = f" pid={self.pid}" if self.pid else ""
        logf = f" log={self.log_file}" if self.log_file else ""
        return f"{self.name:<9} {self.state.value:<10} {self.address}{pid}{logf}"


class Service(abc.ABC):
    """A local process that devstack installs, starts, checks and stops."""

    name: str
    start_timeout: float = 120.0

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def dir(self) -> Path:
        """This service's folder under the devstack home."""
        return self.settings.home / self.name

    @property
    @abc.abstractmethod
    def address(self) -> str: ...

    @property
    @abc.abstractmethod
    def log_file(self) -> Path: ...

    @abc.abstractmethod
    def ports(self) -> list[int]: ...

    @abc.abstractmethod
    def pid(self) -> int | None:
        """The pid of the process devstack started here, if it is alive."""

    @abc.abstractmethod
    def healthy(self) -> bool:
        """True when the service answers real requests on its ports."""

    @abc.abstractmethod
    def install(self) -> None:
        """Fetch or build what the service needs (cached; fast when already done)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Launch the process detached; return without waiting for health."""

    @abc.abstractmethod
    def stop(self, pid: int) -> None: ...

    def status(self) -> Status:
        pid = self.pid()
        if pid is not None:
            state = State.RUNNING if self.healthy() else State.UNHEALTHY
        elif any(procs.port_open(p) for p in self.ports()):
            state = State.EXTERNAL if self.healthy() else State.PORT_BUSY
        else:
            state = State.STOPPED
        return Status(
            name=self.name, state=state, address=self.address, pid=pid, log_file=self.log_file
        )

    def up(self) -> Status:
        """Start the service unless it already runs and answers (idempotent)."""
        with procs.file_lock(self.settings.home / f".{self.name}.lock"):
            status = self.status()
            if status.usable:
                log.info("%s already up (%s)", self.name, status.state.value)
                return status
            if status.state is State.PORT_BUSY:
                busy = [p for p in self.ports() if procs.port_open(p)]
                raise ServiceError(
                    f"{self.name}: port(s) {busy} are taken by another process; "
                    "pick other ports with the SAGAFLOW_*_PORT variables"
                )
            if status.state is State.STOPPED:
                self.dir.mkdir(parents=True, exist_ok=True)
                self.install()
                log.info("starting %s", self.name)
                self.start()
            procs.wait_until(
                self.healthy,
                timeout=self.start_timeout,
                what=f"{self.name} start",
                alive=lambda: self.pid() is not None,
                log_file=self.log_file,
            )
            return self.status()

    def down(self) -> Status:
        """Stop the process devstack started; leave anything else alone."""
        with procs.file_lock(self.settings.home / f".{self.name}.lock"):
            pid = self.pid()
            if pid is not None:
                log.info("stopping %s (pid %d)", self.name, pid)
                self.stop(pid)
            return self.status()
