"""The checkout example: the docs draw the real diagram; the carriers start or say why not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.engine.compiled import compile_saga
from coordinator.sagas.diagram import mermaid
from examples.checkout_saga import CheckoutSaga
from examples.services.carriers import DELAY_ENV, CarrierA, CarrierB, carrier_from

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_show_the_checkout_diagram_the_coordinator_draws() -> None:
    readme = (ROOT / "docs" / "saga-language.md").read_text()
    section = readme.split("## A tree-shaped saga: checkout", 1)[1].split("\n## ", 1)[0]
    drawn = re.search(r"```mermaid\n(.*?)\n```", section, re.S)
    assert drawn is not None
    assert drawn.group(1) == mermaid(compile_saga(CheckoutSaga)).rstrip("\n")


def test_carrier_b_is_the_slower_one_unless_configured() -> None:
    a, b = carrier_from(["carrier_a"], {}), carrier_from(["carrier_b"], {})
    assert (type(a), type(b)) == (CarrierA, CarrierB)
    assert a.delay_ms == 0 < b.delay_ms
    assert carrier_from(["carrier_a"], {DELAY_ENV: "250"}).delay_ms == 250


@pytest.mark.parametrize(("argv", "env", "says"), [
    ([], {}, "usage: python -m examples.services.carriers {carrier_a,carrier_b} (got nothing)"),
    (["dhl"], {}, "(got dhl)"),
    (["carrier_a"], {DELAY_ENV: "-5"}, f"{DELAY_ENV} must be a whole number of milliseconds"),
    (["carrier_a"], {DELAY_ENV: "90000"}, "from 0 to 60000, got '90000'"),
])
def test_a_bad_carrier_or_delay_is_refused_with_one_line(
    argv: list[str], env: dict[str, str], says: str
) -> None:
    with pytest.raises(SystemExit) as refused:
        carrier_from(argv, env)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_the_carrier_process_refuses_a_bad_name_without_a_traceback() -> None:
    done = subprocess.run([sys.executable, "-m", "examples.services.carriers", "dhl"],
                          capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "usage: python -m examples.services.carriers {carrier_a,carrier_b} (got dhl)"]
