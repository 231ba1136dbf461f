"""Settings precedence: arguments over environment over the config file over defaults."""

from __future__ import annotations

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
