"""``python -m bench.peers --smoke`` runs sagaflow and DTM side by side end to end (a harness
check, never the speed). Opt-in: it runs when ``SAGAFLOW_PEERS_DIR`` names the peers folder
(building DTM takes minutes and its harness starts a Postgres of its own, so a test run never
does it by surprise); the parsing, ratios, targets and table are unit-tested on recorded peer
output in tests/unit/test_peer_report.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peers import default_peers_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PEERS = default_peers_dir()
#: Where the DTM harness keeps its build (its run.sh's WORK).
DTM_BUILD = Path(os.environ.get("WORK", "/tmp/peer-dtm")) / "build" / "dtm"


@pytest.mark.skipif(not os.environ.get("SAGAFLOW_PEERS_DIR"),
                    reason="opt-in: set SAGAFLOW_PEERS_DIR to the peers folder")
@pytest.mark.skipif(not (PEERS / "dtm" / "run.sh").is_file(),
                    reason=f"no DTM peer harness at {PEERS}/dtm/run.sh")
@pytest.mark.skipif(shutil.which("go") is None and not DTM_BUILD.exists(),
                    reason="the DTM harness needs Go to build DTM")
def test_peers_smoke(pg_url: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    out_file = tmp_path / "peers.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.peers", "--smoke", "--peers", "dtm",
         "--peers-dir", str(PEERS), "--postgres", pg_url, "--kafka", kafka_bootstrap,
         "--output", str(out_file)],
        cwd=root, env=dict(os.environ), capture_output=True, text=True, timeout=880,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "target tcc@1.p50_ms <= dtm's" in proc.stdout
    data = json.loads(out_file.read_text())
    for system in ("sagaflow", "dtm"):
        for measure in ("tcc@1", "tcc@16", "saga@1", "saga@16"):
            fig = data["figures"][system][measure]
            assert fig["rate"] > 0 and fig["p50_ms"] > 0 and fig["cpu_ms"] > 0, (system, measure)
            assert fig["ok"], (system, measure)
    assert data["figures"]["sagaflow"]["idle"]["round_trips_per_s"] >= 0
    assert set(data["ratios"]["dtm"]) >= {"tcc@1.p50_ms", "saga@16.rate", "tcc@16.cpu_ms"}
    assert {t["name"] for t in data["targets"]} >= {"tcc_one_p50_le_dtm", "tcc_cpu_le_dtm"}
    assert all(t["holds"] is not None for t in data["targets"] if t["peer"] in (None, "dtm"))
