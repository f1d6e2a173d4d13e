"""docs/run-your-own-saga.md, followed as written on the real services.

The page's titled Python blocks become the files they name and its shell blocks run, in order,
as one bash script in an empty folder, with the installed console scripts. Only what must
differ on a shared machine is rewritten: the service addresses, the API port, and the name
``shop`` (package, databases, topic prefix, consumer groups) made unique per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "run-your-own-saga.md"
_BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.S | re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def page_parts(text: str) -> tuple[dict[str, str], list[str]]:
    """(files by path, shell blocks in order) of the page."""
    files: dict[str, str] = {}
    shells: list[str] = []
    for lang, attrs, body in _BLOCK.findall(text):
        title = re.search(r'title="([^"]+)"', attrs)
        if lang == "python" and title:
            files[title[1]] = body
        elif lang == "sh":
            shells.append(body)
    return files, shells


def test_the_page_has_the_parts_this_test_follows() -> None:
    files, shells = page_parts(PAGE.read_text())
    assert set(files) == {"shop/sagas.py", "shop/payments.py", "shop/__init__.py"}
    script = "\n".join(shells)
    for step in ("pip install 'sagaflow-tcc[all]'", "createdb shop_payments",
                 "sagaflow-coordinator migrate", "sagaflow-coordinator topics",
                 "sagaflow-coordinator worker", "sagaflow-relay", "sagaflow-coordinator api",
                 "python -m shop.payments", "POST http://127.0.0.1:8000/sagas", "PYTHONPATH"):
        assert step in script, step


def _run_script(script: str, cwd: Path) -> tuple[int, str]:
    """Run the page's shell steps as one bash script; stop what it left running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGAFLOW_", "OTEL_"))}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        out = "timed out"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in cwd.glob("*.log"))
    ok = proc.returncode == 0 and out != "timed out"
    return (0 if ok else 1), (out if ok else f"{out}\n{logs}")


async def test_following_the_page_completes_a_saga(
        pg_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    name = f"shop{uuid.uuid4().hex[:8]}"
    pg = urlsplit(pg_url)
    api_port = _free_port()
    text = PAGE.read_text()
    for old, new in ((r"\bshop", name),
                     (r"127\.0\.0\.1:5432", f"{pg.hostname}:{pg.port}"),
                     (r"PGPORT=5432", f"PGPORT={pg.port}"),
                     (r"127\.0\.0\.1:9092", kafka_bootstrap),
                     (r"\b8000\b", str(api_port))):
        text = re.sub(old, new, text)
    files, shells = page_parts(text)
    for path, body in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(body)
    # The package is installed already (this test runs in the environment that has it):
    # the venv and pip lines are the reader's, not this run's.
    script = "\n".join(line for line in "\n".join(shells).splitlines()
                       if "python3.11 -m venv" not in line and "pip install" not in line)
    code, out = await asyncio.to_thread(_run_script, script, tmp_path)
    assert code == 0, out
    assert re.search(r"alice\s*\|\s*70\s*\|\s*0", out), out
    admin = await asyncpg.connect(pg_url)
    try:
        for db in (f"{name}_coordinator", f"{name}_payments"):
            await admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    finally:
        await admin.close()
