"""The native stack's broker JVM options come from the settings."""

from __future__ import annotations

from pathlib import Path

from txstream.config import Settings
from txstream.stack.broker import KafkaBroker


def jvm_flags(settings: Settings) -> list[str]:
    argv = KafkaBroker(settings)._java_argv()
    return [a for a in argv[: argv.index("-cp")] if a.startswith("-XX:")]


def test_the_broker_runs_zgc_by_default(tmp_path: Path) -> None:
    assert jvm_flags(Settings(home=tmp_path)) == ["-XX:+UseZGC"]


def test_options_are_split_and_empty_leaves_the_jvm_defaults(tmp_path: Path) -> None:
    custom = Settings(home=tmp_path, kafka_jvm_options="-XX:+UseG1GC  -XX:MaxGCPauseMillis=20")
    assert jvm_flags(custom) == ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
    assert jvm_flags(Settings(home=tmp_path, kafka_jvm_options="")) == []
