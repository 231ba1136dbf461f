"""Settings for every txstream process, from `txstream.toml` and `TXSTREAM_*` variables.

Precedence, highest first: explicit arguments, environment, the config file, defaults. The
config file is `$TXSTREAM_CONFIG`, else `txstream.toml` in the project root.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


def default_schema_dir() -> Path:
    """The checkout's `schemas/`; in an installed wheel, the copy packaged with txstream
    (`txstream/avro`, a link to `schemas/` in the checkout)."""
    checkout = project_root() / "schemas"
    return checkout if checkout.is_dir() else Path(__file__).with_name("avro")


def project_root() -> Path:
    """The checkout that holds `schemas/` and the Makefile.

    An editable install keeps the package inside the checkout, so walking up from this file
    finds it; `TXSTREAM_ROOT` overrides that for installed copies (e.g. container images).
    """
    env = os.environ.get("TXSTREAM_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "schemas").is_dir() and (parent / "pyproject.toml").is_file():
            return parent
    return Path.cwd()


def _config_file() -> Path:
    env = os.environ.get("TXSTREAM_CONFIG")
    return Path(env) if env else project_root() / "txstream.toml"


class Settings(BaseSettings):
    """One flat namespace; each field maps to `TXSTREAM_<FIELD>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="TXSTREAM_", extra="forbid")

    home: Path = project_root() / ".txstream"
    kafka_bootstrap: str | None = None
    kafka_host: str = "127.0.0.1"
    kafka_port: int = 9092
    kafka_controller_port: int = 9192
    kafka_libs: Path = project_root() / "build" / "kafka" / "libs"
    kafka_heap: str = "768m"
    # The native stack's broker count: 1, or 3 for a KRaft cluster whose topics have three
    # replicas and accept a write once two hold it. Node n (1-based) listens on kafka_port
    # + n - 1 and kafka_controller_port + n - 1.
    kafka_brokers: int = Field(default=1, ge=1, le=9)
    kafka_partitions: int = 1
    # The largest record (key and value) an engine produces: its producer's
    # message.max.bytes. librdkafka's default, below the broker's and topics' default
    # max.message.bytes (1 MiB + 12), so a record it lets through the broker takes too.
    kafka_max_record_bytes: int = Field(default=1_000_000, ge=1_000)
    startup_timeout_s: float = 60.0
    # A worker that dies is replaced in its slot within seconds (static membership); a
    # worker stopped for good holds its partitions this long. The broker's minimum is 6 s.
    worker_session_timeout_s: float = 10.0
    # A standby coordinator takes over this long (plus about a second) after the active one
    # dies; the broker's minimum is 6 s. The active one truncates its log this often.
    coordinator_session_timeout_s: float = Field(default=6.0, gt=0)
    coordinator_log_truncate_s: float = Field(default=30.0, gt=0)
    schema_dir: Path = Field(default_factory=default_schema_dir)
    # The native stack's Prometheus (Debian's package); services register their own targets.
    prometheus_bin: str = "prometheus"
    prometheus_host: str = "127.0.0.1"
    prometheus_port: int = 9090
    prometheus_scrape_interval_s: float = 5.0
    prometheus_retention: str = "15d"
    # Warehouse ETL (spark-jobs/): a cluster and object storage are configuration, not code.
    # Unset URIs default to `<home>/warehouse` and `<warehouse>/<app>/_checkpoints`: the
    # checkpoints must live and die with the tables (exactly-once needs both).
    spark_master: str = "local[2]"
    spark_jars: Path = project_root() / "build" / "spark" / "jars"
    warehouse_uri: str | None = None
    checkpoint_uri: str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=_config_file())
        return (init_settings, env_settings, toml)

    @model_validator(mode="after")
    def _ports_apart(self) -> Settings:
        clients = range(self.kafka_port, self.kafka_port + self.kafka_brokers)
        controllers = range(
            self.kafka_controller_port, self.kafka_controller_port + self.kafka_brokers
        )
        if set(clients) & set(controllers):
            raise ValueError(
                f"{self.kafka_brokers} brokers need client ports {clients.start}-"
                f"{clients.stop - 1} and controller ports {controllers.start}-"
                f"{controllers.stop - 1}, which overlap; set TXSTREAM_KAFKA_CONTROLLER_PORT"
            )
        return self

    @property
    def bootstrap_servers(self) -> str:
        """An external cluster when `kafka_bootstrap` is set, else the local brokers."""
        if self.kafka_bootstrap:
            return self.kafka_bootstrap
        ports = range(self.kafka_port, self.kafka_port + self.kafka_brokers)
        return ",".join(f"{self.kafka_host}:{port}" for port in ports)

    @property
    def kafka_replication(self) -> int:
        """Replicas per partition on the local cluster: three once there are three brokers."""
        return min(3, self.kafka_brokers)

    @property
    def kafka_min_insync(self) -> int:
        """Replicas that must hold a write before it is acknowledged: all but one of three."""
        return max(1, self.kafka_replication - 1)

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"
