"""The HA services a failover scenario owns: a Postgres primary + synchronous standby, and a
three-broker Kafka cluster, both from :mod:`devstack` on free ports in a private folder.

Faults are final: the primary is SIGKILLed (every process of it, as when its machine is lost)
and never started again; a killed broker stays down. The blocking calls run in a thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path

from devstack import procs
from devstack.config import Settings
from devstack.ha_config import HaSettings
from devstack.ha_kafka import KafkaCluster
from devstack.ha_postgres import PostgresPair
from tests.chaos.support.services import free_port


def children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def sigkill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its children at once: stopped first so it forks nothing meanwhile."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    for target in [pid, *children(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)
    procs.wait_until(lambda: not procs.pid_alive(pid), timeout=20, what=f"pid {pid} killed")
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


class OwnedPostgresPair:
    """A primary and its synchronous standby; lose the primary, promote the standby."""

    def __init__(self) -> None:
        # The servers run as the postgres OS user: the home must be traversable by it.
        home = Path(tempfile.mkdtemp(prefix="sagaflow-chaos-pgha-"))
        home.chmod(0o755)
        base = Settings.from_env()
        self.settings = HaSettings(
            base=Settings(home=home, cache=base.cache, pg_port=free_port()),
            pg_standby_port=free_port(), kafka_nodes=())
        self.pair = PostgresPair(self.settings)

    @property
    def url(self) -> str:
        """The multi-host DSN (``target_session_attrs=read-write``) every client uses."""
        return self.settings.postgres_url

    def up(self) -> None:
        self.pair.up()

    def synchronous(self) -> bool:
        return self.pair.synchronous()

    def kill_primary(self) -> None:
        pid = self.pair.primary.pid()
        assert pid is not None, "the primary is not running"
        sigkill_tree(pid)

    def promote(self) -> None:
        self.pair.promote()

    def down(self) -> None:
        with contextlib.suppress(Exception):
            self.pair.down()
        shutil.rmtree(self.settings.base.home, ignore_errors=True)


class OwnedKafkaCluster:
    """Three combined broker+controller nodes; SIGKILL one and keep it down."""

    def __init__(self, home: Path) -> None:
        cache = Settings.from_env().cache
        nodes = tuple((free_port(), free_port()) for _ in range(3))
        base = Settings(home=home, cache=cache, kafka_port=nodes[0][0],
                        kafka_controller_port=nodes[0][1])
        self.settings = HaSettings(base=base, pg_standby_port=0, kafka_nodes=nodes)
        self.cluster = KafkaCluster(self.settings)

    @property
    def bootstrap(self) -> str:
        return self.settings.kafka_bootstrap

    def up(self) -> None:
        self.cluster.up()

    def kill(self, node_id: int) -> None:
        node = self.cluster.nodes[node_id - 1]
        pid = node.pid()
        assert pid is not None, f"{node.name} is not running"
        sigkill_tree(pid)
        procs.wait_until(lambda: not any(procs.port_open(p) for p in node.ports()),
                         timeout=30, what=f"{node.name} ports released")

    def down(self) -> None:
        with contextlib.suppress(Exception):
            self.cluster.down()
        shutil.rmtree(self.settings.base.home, ignore_errors=True)
