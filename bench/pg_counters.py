"""What a Postgres server did during a measured phase: WAL, checkpoints, buffers, HOT updates
and the server's CPU, read from its statistics views before and after.

A rate on a shared machine says little by itself; these say whether the phase was bound by
I/O (blocks read from outside ``shared_buffers``, dirty pages written by the backends
themselves, checkpoints, full-page images in the WAL) or by CPU, and how many of the phase's
updates were HOT (no index entry written).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from bench.stack import cpu_seconds

_TICK = os.sysconf("SC_CLK_TCK")

_COUNTERS = """
SELECT w.wal_bytes::bigint AS wal_bytes, w.wal_fpi, b.checkpoints_timed + b.checkpoints_req
       AS checkpoints, b.buffers_backend, d.blks_read, d.blks_hit,
       (SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables)::bigint AS updates,
       (SELECT coalesce(sum(n_tup_hot_upd), 0) FROM pg_stat_user_tables)::bigint AS hot,
       current_setting('shared_buffers') AS shared_buffers, pg_backend_pid() AS backend
FROM pg_stat_wal w, pg_stat_bgwriter b, pg_stat_database d
WHERE d.datname = current_database()
"""


@dataclass(frozen=True)
class Counters:
    wal_bytes: int
    wal_fpi: int
    checkpoints: int
    buffers_backend: int
    blks_read: int
    blks_hit: int
    updates: int
    hot: int
    server_cpu: float
    shared_buffers: str


def _postmaster(backend: int) -> int:
    try:
        return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def server_cpu_seconds(postmaster: int) -> float:
    """CPU of every process of the server: its live children plus the ones that exited
    (backends of closed connections), which the postmaster reaped (cutime, cstime); 0 when
    the server is on another machine."""
    try:
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    reaped = (int(fields[13]) + int(fields[14])) / _TICK
    live = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _postmaster(int(entry.name)) == postmaster:
            live += cpu_seconds(int(entry.name))
    return reaped + live


async def read_counters(conn: asyncpg.Connection) -> Counters:
    """The cumulative counters now (table counters: the database of ``conn``). The statistics
    collector publishes a backend's counts when its transaction ends, so read after the
    measured connections are closed or idle."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await conn.fetchrow(_COUNTERS)
    assert row is not None
    return Counters(row["wal_bytes"], row["wal_fpi"], row["checkpoints"],
                    row["buffers_backend"], row["blks_read"], row["blks_hit"], row["updates"],
                    row["hot"], server_cpu_seconds(_postmaster(row["backend"])),
                    row["shared_buffers"])


def describe(before: Counters, after: Counters, events: int) -> str:
    """One line: per event WAL, full-page images, Postgres CPU; checkpoints, the buffer hit
    ratio, dirty pages the backends had to write themselves, and the HOT share of updates."""
    read = after.blks_read - before.blks_read
    hit = after.blks_hit - before.blks_hit
    updates = after.updates - before.updates
    hot = after.hot - before.hot
    n = max(events, 1)
    return (f"{(after.wal_bytes - before.wal_bytes) / n:,.0f} WAL bytes and "
            f"{(after.wal_fpi - before.wal_fpi) / n:.2f} full-page images per event, "
            f"{after.checkpoints - before.checkpoints} checkpoint(s); shared_buffers "
            f"{after.shared_buffers}: hit ratio {hit / max(hit + read, 1):.1%} "
            f"({read:,} blocks read), {after.buffers_backend - before.buffers_backend:,} "
            f"written by backends; {hot / max(updates, 1):.0%} of {updates:,} updates HOT; "
            f"Postgres CPU {(after.server_cpu - before.server_cpu) / n * 1e6:,.0f} us per event")
