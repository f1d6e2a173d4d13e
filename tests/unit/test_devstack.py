"""devstack's settings and generated configs, without starting anything."""

from __future__ import annotations

import contextlib
import re
import socket
from pathlib import Path

import pytest

import devstack
from devstack import procs
from devstack.cli import fixture_env, main
from devstack.config import Settings
from devstack.errors import DevstackError, ProvisionError, ServiceError
from devstack.jaeger import CONFIG, required_go
from devstack.kafka import Kafka
from devstack.provision import provision
from devstack.service import State


def test_public_surface() -> None:
    assert sorted(devstack.__all__) == [
        "DevstackError", "HaSettings", "Jaeger", "Kafka", "KafkaCluster", "Postgres",
        "PostgresPair", "ProvisionError", "Service", "ServiceError", "Settings", "State",
        "Status", "provision",
    ]  # fmt: skip


def test_readme_asks_for_the_go_that_the_jaeger_module_needs() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    asked = re.search(r"Go (\d+\.\d+(?:\.\d+)?)\s+or\s+newer", readme)
    assert asked is not None, "the README no longer states a Go version"
    assert asked[1] == required_go()


def test_defaults_live_in_the_repo() -> None:
    s = Settings.from_env({})
    root = Path(devstack.__file__).resolve().parents[1]
    assert (s.home, s.cache) == (root / ".local", root / ".cache")
    assert s.postgres_url == "postgresql://postgres@127.0.0.1:55432/postgres"
    assert s.kafka_bootstrap == "127.0.0.1:19092"
    assert (s.jaeger_otlp_url, s.jaeger_query_url) == (
        "http://127.0.0.1:4318",
        "http://127.0.0.1:16686",
    )


def test_env_overrides(tmp_path: Path) -> None:
    s = Settings.from_env(
        {
            "SAGAFLOW_DEVSTACK_HOME": str(tmp_path / "h"),
            "SAGAFLOW_CACHE_DIR": str(tmp_path / "c"),
            "SAGAFLOW_PG_PORT": "1234",
            "SAGAFLOW_KAFKA_PORT": "2345",
        }
    )
    assert (s.home, s.cache) == (tmp_path / "h", tmp_path / "c")
    assert s.postgres_url.endswith(":1234/postgres")
    assert s.kafka_bootstrap == "127.0.0.1:2345"


@pytest.mark.parametrize("bad", ["x", "0", "70000"])
def test_bad_port_is_refused(bad: str) -> None:
    with pytest.raises(DevstackError, match="SAGAFLOW_PG_PORT"):
        Settings.from_env({"SAGAFLOW_PG_PORT": bad})


def test_everything_binds_loopback_only(tmp_path: Path) -> None:
    kafka = Kafka(Settings(home=tmp_path, cache=tmp_path))
    props = kafka._server_properties()
    for line in props.splitlines():
        if line.startswith(("listeners=", "advertised.listeners=")):
            assert all("127.0.0.1:" in part for part in line.split("=", 1)[1].split(","))
    assert "process.roles=broker,controller\n" in props
    assert "--standalone" not in props
    rendered = CONFIG.format(host="127.0.0.1", query=1, query_grpc=2, otlp_grpc=3, otlp_http=4)
    endpoints = re.findall(r"endpoint: (\S+)", rendered)
    assert len(endpoints) == 4
    assert all(e.startswith("127.0.0.1:") for e in endpoints)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_status_of_an_empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGAFLOW_DEVSTACK_HOME", str(tmp_path))
    for var in ("SAGAFLOW_KAFKA_PORT", "SAGAFLOW_KAFKA_CONTROLLER_PORT"):
        monkeypatch.setenv(var, str(_free_port()))
    kafka = Kafka(Settings.from_env())
    assert kafka.status().state is State.STOPPED
    assert kafka.down().state is State.STOPPED  # stopping what is not running is a no-op


def test_env_command_prints_fixture_variables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    for key, value in fixture_env(Settings.from_env()).items():
        assert f"export {key}={value}" in out


def test_unknown_service_name() -> None:
    with pytest.raises(ProvisionError, match="unknown service"), contextlib.ExitStack() as s:
        provision("redis", s)


def test_wait_until_takes_one_missed_look_for_a_starting_process_not_an_exit() -> None:
    looks = iter([False, True, True, True])
    ready = iter([False, False, True])
    procs.wait_until(lambda: next(ready), timeout=5, what="x", interval=0,
                     alive=lambda: next(looks))
    with pytest.raises(ServiceError, match="x: process exited"):
        procs.wait_until(lambda: False, timeout=5, what="x", interval=0, alive=lambda: False)


def test_jaeger_build_runs_niced_so_a_demo_starting_beside_it_keeps_the_cores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devstack import jaeger

    ran: list[list[str]] = []

    def fake_run(argv: list[str], **_: object) -> str:
        ran.append(list(argv))
        Path(argv[argv.index("-o") + 1]).write_bytes(b"")
        return ""

    monkeypatch.setattr(jaeger.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(jaeger.procs, "run", fake_run)
    jaeger.build_binary(tmp_path / "jaeger")
    assert ran[0][:3] == ["nice", "-n", "19"]
    assert ran[0][3:5] == ["/usr/bin/go", "build"]
    assert (tmp_path / "jaeger").is_file()


def test_a_broker_opens_jmx_only_on_a_free_port_so_a_second_broker_still_starts(
        tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        taken = Kafka(Settings.from_env({"SAGAFLOW_DEVSTACK_HOME": str(tmp_path),
                                         "SAGAFLOW_KAFKA_JMX_PORT": str(port)}))
        assert taken.jmx_options() == []
    free = Kafka(Settings.from_env({"SAGAFLOW_DEVSTACK_HOME": str(tmp_path),
                                    "SAGAFLOW_KAFKA_JMX_PORT": str(port)}))
    options = free.jmx_options()
    assert f"-Dcom.sun.management.jmxremote.port={port}" in options
    assert "-Dcom.sun.management.jmxremote.host=127.0.0.1" in options
