"""devstack under a Python that lacks its dependencies says so at once, naming the Python."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

from devstack import requirements
from devstack.cli import main
from devstack.errors import DevstackError
from devstack.kafka import Kafka


def test_only_the_services_that_need_a_module_ask_for_it() -> None:
    assert requirements.missing_modules(["postgres", "jaeger"], lambda m: False) == []
    assert requirements.missing_modules(["kafka", "kafka-ha"], lambda m: False) == ["aiokafka"]
    assert requirements.missing_modules(["kafka"], lambda m: True) == []


def test_the_error_names_the_module_the_python_and_the_one_to_use() -> None:
    with pytest.raises(DevstackError) as caught:
        requirements.require(["postgres", "kafka"], lambda m: m != "aiokafka")
    message = str(caught.value)
    assert message.startswith(f"{sys.executable} cannot import aiokafka")
    assert "check kafka;" in message and ".venv/bin/python -m devstack" in message


def test_up_kafka_without_aiokafka_fails_at_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SAGAFLOW_DEVSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SAGAFLOW_CACHE_DIR", str(tmp_path / "cache"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "aiokafka" else real(name, *a))
    monkeypatch.setattr(Kafka, "up", lambda self: pytest.fail("must not start or wait"))
    started = time.monotonic()
    assert main(["up", "kafka"]) == 2
    assert time.monotonic() - started < 5
    assert "cannot import aiokafka" in capsys.readouterr().err


def test_install_fetches_without_starting_or_needing_aiokafka(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # make demo runs `install` with the system Python while the venv is being created.
    binary = tmp_path / "jaeger-bin"
    binary.write_text("#!/bin/sh\n")
    monkeypatch.setenv("SAGAFLOW_DEVSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SAGAFLOW_JAEGER_BIN", str(binary))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "aiokafka" else real(name, *a))
    assert main(["install", "jaeger"]) == 0
    assert "jaeger    installed" in capsys.readouterr().out
    assert (tmp_path / "home" / "jaeger" / "config.yaml").is_file()
    assert not (tmp_path / "home" / "jaeger" / "jaeger.pid").exists()
