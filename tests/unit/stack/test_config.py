"""Settings precedence: arguments over environment over the config file over defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from txstream.config import Settings


def test_environment_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "txstream.toml"
    cfg.write_text('kafka_port = 19000\nkafka_host = "127.0.0.2"\n')
    monkeypatch.setenv("TXSTREAM_CONFIG", str(cfg))
    monkeypatch.setenv("TXSTREAM_KAFKA_PORT", "19001")
    s = Settings()
    assert s.kafka_port == 19001
    assert s.bootstrap_servers == "127.0.0.2:19001"


def test_explicit_bootstrap_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXSTREAM_KAFKA_BOOTSTRAP", "broker:29092")
    assert Settings().bootstrap_servers == "broker:29092"


def test_unknown_key_in_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "txstream.toml"
    cfg.write_text("kafka_prot = 1\n")
    monkeypatch.setenv("TXSTREAM_CONFIG", str(cfg))
    with pytest.raises(ValidationError, match="kafka_prot"):
        Settings()


def test_bad_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXSTREAM_KAFKA_PORT", "not-a-port")
    with pytest.raises(ValidationError, match="kafka_port"):
        Settings()


def test_a_three_broker_cluster_lists_every_node_and_replicates_three_ways() -> None:
    s = Settings(kafka_brokers=3, kafka_port=19092, kafka_controller_port=19192)
    assert s.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert (s.kafka_replication, s.kafka_min_insync) == (3, 2)
    assert (Settings().kafka_replication, Settings().kafka_min_insync) == (1, 1)


def test_overlapping_cluster_ports_are_named() -> None:
    with pytest.raises(ValidationError, match="overlap; set TXSTREAM_KAFKA_CONTROLLER_PORT"):
        Settings(kafka_brokers=3, kafka_port=19092, kafka_controller_port=19093)


def test_the_command_names_a_bad_setting_in_a_line_not_a_traceback(tmp_path: Path) -> None:
    """It printed pydantic's traceback and exited 1."""
    txstream = Path(sys.executable).with_name("txstream")
    env = {**os.environ, "TXSTREAM_HOME": str(tmp_path), "TXSTREAM_SPARK_WORKERS": "-1"}
    done = subprocess.run(
        [str(txstream), "stack", "status"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: setting spark_workers (TXSTREAM_"), done.stderr
    assert "'-1'" in done.stderr
