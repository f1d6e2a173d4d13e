"""Process helpers: pid files, detached spawning, waiting, locking and running as another user."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from devstack.errors import ServiceError

log = logging.getLogger(__name__)


def read_pid(pid_file: Path) -> int | None:
    """The pid on the first line of ``pid_file``, or None when missing or unreadable."""
    try:
        first = pid_file.read_text().splitlines()[0].strip()
        return int(first)
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int | None) -> bool:
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def pid_running(pid_file: Path, marker: str) -> int | None:
    """The pid in ``pid_file`` if it is alive and its command line mentions ``marker``.

    The marker guards against a stale pid file whose pid now belongs to another program.
    """
    pid = read_pid(pid_file)
    if not pid_alive(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return pid
    return pid if marker in cmdline else None


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.25,
    alive: Callable[[], bool] | None = None,
    log_file: Path | None = None,
) -> None:
    """Poll ``check`` until true; raise ServiceError on timeout or when ``alive`` turns false."""
    deadline = time.monotonic() + timeout
    gone = 0
    while True:
        if check():
            return
        # Two looks in a row: one read of /proc can miss a process that is busy starting.
        gone = gone + 1 if alive is not None and not alive() else 0
        if gone >= 2:
            raise ServiceError(f"{what}: process exited{_tail_hint(log_file)}")
        if time.monotonic() > deadline:
            raise ServiceError(f"{what}: not ready after {timeout:.0f}s{_tail_hint(log_file)}")
        time.sleep(interval)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _tail_hint(log_file: Path | None) -> str:
    if log_file is None:
        return ""
    return f" (log: {log_file})\n{tail(log_file)}"


def spawn_detached(
    argv: Sequence[str],
    *,
    pid_file: Path,
    log_file: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> int:
    """Start ``argv`` in its own session, output appended to ``log_file``; write its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def terminate(pid: int, *, timeout: float = 30.0) -> None:
    """SIGTERM the process group of ``pid``, then SIGKILL it if it outlives ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                return
            time.sleep(0.2)
        log.warning("pid %d ignored %s", pid, sig.name)
    raise ServiceError(f"pid {pid} survived SIGKILL")


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes, so two ``up`` calls never race each other."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(
    argv: Sequence[str],
    *,
    user: str | None = None,
    timeout: float = 600,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    new_session: bool = False,
) -> str:
    """Run a command to completion (as ``user`` via runuser when given); return its output."""
    cmd = [*(["runuser", "-u", user, "--"] if user else []), *argv]
    try:
        done = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            start_new_session=new_session,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServiceError(f"{' '.join(cmd)}: {exc}") from exc
    if done.returncode != 0:
        raise ServiceError(
            f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}{done.stderr}".rstrip()
        )
    return done.stdout


def ensure_os_user(name: str) -> None:
    """Create a system user ``name`` when it does not exist (needs root)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name])


def chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in [*dirs, *files]:
            with contextlib.suppress(FileNotFoundError):
                os.lchown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
