"""The processes' event loop: uvloop by default when installed, asyncio's on request, and a
bad choice is one settings line."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import uvloop

from participant_sdk.event_loop import EVENT_LOOP_SETTING, loop_factory, run
from participant_sdk.startup_errors import SettingsError


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_the_default_is_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_SETTING, raising=False)
    assert run(_loop_type()) is uvloop.Loop
    monkeypatch.setenv(EVENT_LOOP_SETTING, " UVLOOP ")
    assert run(_loop_type()) is uvloop.Loop


def test_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_SETTING, "asyncio")
    assert loop_factory() is None
    assert not issubclass(run(_loop_type()), uvloop.Loop)


def test_without_uvloop_auto_falls_back_and_uvloop_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert loop_factory("auto") is None
    with pytest.raises(SettingsError, match=r"^SAGAFLOW_EVENT_LOOP=uvloop, but uvloop is not "
                                            r"installed \(pip install uvloop"):
        loop_factory("uvloop")


def test_a_bad_choice_names_the_setting_and_does_not_leak_the_coroutine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_SETTING, "trio")
    coro = _loop_type()
    with pytest.raises(SettingsError, match=r"^SAGAFLOW_EVENT_LOOP='trio': give auto, uvloop "
                                            r"or asyncio$"):
        run(coro)
    assert coro.cr_frame is None  # closed, so no "never awaited" warning


@pytest.mark.parametrize("command", [["outbox_relay"], ["examples.services.payments"],
                                     ["coordinator", "worker"]])
def test_a_process_with_a_bad_choice_says_so_in_one_line(command: list[str]) -> None:
    env = {"PATH": "/usr/bin:/bin", EVENT_LOOP_SETTING: "fast",
           "SAGAFLOW_DSN": "postgresql://127.0.0.1:1/x",
           "SAGAFLOW_SAGAS": "examples.order_saga:OrderSaga",
           "SAGAFLOW_RELAY_POSTGRES_DSN": "postgresql://127.0.0.1:1/x",
           "SAGAFLOW_PARTICIPANT_DSN": "postgresql://127.0.0.1:1/x"}
    done = subprocess.run([sys.executable, "-m", *command], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].endswith("error: SAGAFLOW_EVENT_LOOP='fast': give auto, uvloop or "
                              "asyncio"), done.stderr
    assert "Traceback" not in done.stderr
