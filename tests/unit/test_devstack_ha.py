"""devstack's HA mode settings and generated configs, and DSN handling for multi-host URLs."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from devstack.cli import main
from devstack.errors import DevstackError
from devstack.ha_config import HaSettings
from devstack.ha_kafka import KafkaCluster, new_cluster_id
from devstack.ha_postgres import STANDBY_NAME, PostgresPair
from examples.stack import dsn_for
from outbox_relay.relay import _is_transient
from participant_sdk.errors import is_transient
from tests.chaos.support.stack import database_url

ENV = {
    "SAGAFLOW_DEVSTACK_HOME": "/tmp/sagaflow-ha-unit",
    "SAGAFLOW_PG_PORT": "57432",
    "SAGAFLOW_PG_STANDBY_PORT": "57433",
    "SAGAFLOW_KAFKA_PORT": "39092",
    "SAGAFLOW_KAFKA_CONTROLLER_PORT": "39093",
    "SAGAFLOW_KAFKA2_PORT": "39094",
    "SAGAFLOW_KAFKA2_CONTROLLER_PORT": "39095",
    "SAGAFLOW_KAFKA3_PORT": "39096",
    "SAGAFLOW_KAFKA3_CONTROLLER_PORT": "39097",
}


def test_defaults_and_overrides() -> None:
    default = HaSettings.from_env({})
    assert default.pg_standby_port == 55433
    assert default.kafka_nodes == ((19092, 19093), (19094, 19095), (19096, 19097))
    s = HaSettings.from_env(ENV)
    assert s.postgres_url == (
        "postgresql://postgres@127.0.0.1:57432,127.0.0.1:57433/postgres"
        "?target_session_attrs=read-write"
    )
    assert s.kafka_bootstrap == "127.0.0.1:39092,127.0.0.1:39094,127.0.0.1:39096"
    assert s.standby.pg_port == 57433 and s.standby.home == s.base.home


def test_bad_ha_port_is_refused() -> None:
    with pytest.raises(DevstackError, match="SAGAFLOW_KAFKA3_PORT"):
        HaSettings.from_env({"SAGAFLOW_KAFKA3_PORT": "nope"})


def test_primary_waits_for_the_standby_it_clones() -> None:
    pair = PostgresPair(HaSettings.from_env(ENV))
    primary, standby = pair.primary.server_settings(), pair.standby.server_settings()
    assert primary["synchronous_standby_names"] == STANDBY_NAME
    assert primary["synchronous_commit"] == "on"
    assert standby["cluster_name"] == STANDBY_NAME  # its walreceiver's application_name
    # Promoted, it must not wait for a standby of its own that does not exist.
    assert "synchronous_standby_names" not in standby
    assert pair.primary.dir != pair.standby.dir
    assert pair.standby.primary_port == 57432


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_three_voters_replication_three_min_isr_two_loopback_only(tmp_path: Path) -> None:
    cluster = KafkaCluster(HaSettings.from_env({**ENV, "SAGAFLOW_DEVSTACK_HOME": str(tmp_path)}))
    props = [_props(node._server_properties()) for node in cluster.nodes]
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    voters = "1@127.0.0.1:39093,2@127.0.0.1:39095,3@127.0.0.1:39097"
    for p, port in zip(props, (39092, 39094, 39096), strict=True):
        assert p["controller.quorum.voters"] == voters
        assert p["listeners"] == f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1}"
        assert p["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{port}"
        assert (p["default.replication.factor"], p["min.insync.replicas"]) == ("3", "2")
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["unclean.leader.election.enable"] == "false"
    assert len({node.dir for node in cluster.nodes}) == 3
    assert all(node.heap == "-Xmx256m" for node in cluster.nodes)


def test_cluster_ids_look_like_kafkas() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_env_ha_prints_the_multi_host_addresses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert main(["env", "--ha"]) == 0
    out = capsys.readouterr().out
    assert "127.0.0.1:57432,127.0.0.1:57433/postgres?target_session_attrs=read-write" in out
    assert "SAGAFLOW_TEST_KAFKA_BOOTSTRAP=127.0.0.1:39092,127.0.0.1:39094,127.0.0.1:39096" in out


@pytest.mark.parametrize("swap", [dsn_for, database_url])
def test_database_swap_keeps_the_hosts_and_the_query(swap: object) -> None:
    url = "postgresql://postgres@h1:1,h2:2/postgres?target_session_attrs=read-write"
    assert swap(url, "orders") == (  # type: ignore[operator]
        "postgresql://postgres@h1:1,h2:2/orders?target_session_attrs=read-write")
    assert swap("postgresql://u@h:5/postgres", "x") == "postgresql://u@h:5/x"  # type: ignore[operator]


def test_no_writable_server_yet_is_transient() -> None:
    exc = asyncpg.exceptions.TargetServerAttributeNotMatched("none is read-write")
    assert is_transient(exc)
    assert _is_transient(exc)


def test_ui_participant_dsns_may_be_multi_host() -> None:
    from coordinator.ui.settings import UiSettings

    multi = "postgresql://u@h1:1,h2:2/pay?target_session_attrs=read-write"
    settings = UiSettings(participant_dsns=f"payments={multi}, stock=postgresql://u@h:3/inv")
    assert settings.participant_dsns == {"payments": multi, "stock": "postgresql://u@h:3/inv"}
