"""``--help`` texts read as plain text: no reST markup from the docstrings they come from."""

from __future__ import annotations

import contextlib
import io

import pytest

from coordinator.cli.main import main as coordinator_main
from coordinator.cli.main import plain
from coordinator.cli.ops import main as saga_main


def _help(run: object, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        run(argv)  # type: ignore[operator]
    return out.getvalue()


def test_plain_drops_rest_markup() -> None:
    assert plain("see :class:`~a.B`, :func:`c` and ``x``") == "see a.B, c and x"


@pytest.mark.parametrize("argv", [[], ["worker"], ["api"], ["migrate"]])
def test_the_coordinator_help_has_no_markup(argv: list[str]) -> None:
    text = _help(coordinator_main, [*argv, "--help"])
    assert "usage: sagaflow-coordinator" in text
    assert "``" not in text and ":class:" not in text


@pytest.mark.parametrize("argv", [[], ["list"], ["show"], ["retry"], ["bulk"]])
def test_the_saga_help_has_no_markup(argv: list[str]) -> None:
    text = _help(saga_main, [*argv, "--help"])
    assert "``" not in text and ":class:" not in text
