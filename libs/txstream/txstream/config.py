"""Settings for every txstream process, from `txstream.toml` and `TXSTREAM_*` variables.

Precedence, highest first: explicit arguments, environment, the config file, defaults. The
config file is `$TXSTREAM_CONFIG`, else `txstream.toml` in the project root.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from txstream.cpus import parse_cpus


def default_schema_dir() -> Path:
    """The checkout's `schemas/`; in an installed wheel, the copy packaged with txstream
    (`txstream/avro`, a link to `schemas/` in the checkout). Never the working directory's
    `schemas/`, which is the user's own."""
    root = checkout()
    if root is not None and (root / "schemas").is_dir():
        return root / "schemas"
    return Path(__file__).with_name("avro")


def project_root() -> Path:
    """The checkout that holds `schemas/` and the Makefile, or else the working directory
    (an installed wheel's home for its state)."""
    return checkout() or Path.cwd()


def checkout() -> Path | None:
    """The checkout txstream runs from, if any: an editable install keeps the package
    inside it, so walking up from this file finds it; `TXSTREAM_ROOT` names one for
    installed copies (e.g. container images)."""
    env = os.environ.get("TXSTREAM_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "schemas").is_dir() and (parent / "pyproject.toml").is_file():
            return parent
    return None


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
    # A 2 GB heap with `-XX:-ZProactive` collects once a minute or two instead of every
    # 8-16 s under load, but gave the Leaderboard no lower p99 in alternating runs
    # (docs/performance-history.md, 2026-11-29), so the dev broker keeps its RAM small.
    kafka_heap: str = "768m"
    # The native stack's broker JVM. ZGC's pauses are under a millisecond; G1's young
    # collections, once per few seconds under load, paused the broker 20-83 ms on two shared
    # cores, and in three paced runs held 106-260 of the 260 slowest batches
    # (docs/performance-history.md, 2026-11-28). "" keeps the JVM's defaults.
    kafka_jvm_options: str = "-XX:+UseZGC"
    # CPUs (a Linux CPU list: "0", "1-3", "0,2") the native broker, and each worker, may run
    # on; "" leaves them to the OS. On one machine, apart, they do not preempt each other
    # (`txstream.cpus`): the Leaderboard's p99 at 3,000 batches/s on two cores went from
    # 108-397 ms to 43-61 with the broker on CPU 0 and the worker on CPU 1. Off by default:
    # several workers kept to a part of a small machine share it (docs/performance-history.md).
    kafka_cpus: str = ""
    worker_cpus: str = ""
    # The native stack's broker count: 1, or 3 for a KRaft cluster whose topics have three
    # replicas and accept a write once two hold it. Node n (1-based) listens on kafka_port
    # + n - 1 and kafka_controller_port + n - 1.
    kafka_brokers: int = Field(default=1, ge=1, le=9)
    kafka_partitions: int = 1
    # The largest record (key and value) an engine produces: its producer's
    # message.max.bytes. librdkafka's default, below the broker's and topics' default
    # max.message.bytes (1 MiB + 12), so a record it lets through the broker takes too.
    kafka_max_record_bytes: int = Field(default=1_000_000, ge=1_000)
    # `sasl_ssl`: every client authenticates with SCRAM-SHA-512 over TLS, and the broker
    # authorizes it by its principal's ACLs (`txstream acl apply`). A service connects as
    # its role (worker, sequencer, coordinator); every other process as `kafka_user`.
    # Passwords: `kafka_password`, else `<kafka_secrets_dir>/<user>.password`, which the
    # native stack writes (random, mode 0600); the broker's CA: `kafka_ca_file`.
    kafka_security: Literal["plaintext", "sasl_ssl"] = "plaintext"
    kafka_user: str = "client"
    kafka_password: SecretStr | None = None
    kafka_secrets_dir: Path | None = None
    kafka_ca_file: Path | None = None
    # A bearer token the coordinator's HTTP endpoint requires; with sasl_ssl and none set,
    # the one in `<kafka_secrets_dir>/http.token`.
    http_token: SecretStr | None = None
    # The key that proves a request, decision, vote or coordinator log record came from a
    # service (`txstream.oltp.origin`), as hex; none set: `<secrets dir>/internal.key`,
    # created at first use. Every service of a stack must have the same one.
    internal_key: SecretStr | None = None
    startup_timeout_s: float = 60.0
    # A worker that dies is replaced in its slot within seconds (static membership); a
    # worker stopped for good holds its partitions this long. The broker's minimum is 6 s.
    worker_session_timeout_s: float = 10.0
    # A standby coordinator takes over this long (plus about a second) after the active one
    # dies; the broker's minimum is 6 s. The active one truncates its log this often.
    coordinator_session_timeout_s: float = Field(default=6.0, gt=0)
    coordinator_log_truncate_s: float = Field(default=30.0, gt=0)
    schema_dir: Path = Field(default_factory=default_schema_dir)
    # The Confluent-API schema registry (`txstream registry run`) of Confluent-framed records.
    schema_registry_url: str = "http://127.0.0.1:8081"
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
    # `txstream stack up` starts a standalone cluster of this many workers (0: none); the ETL
    # runs on it when spark_master is spark://127.0.0.1:<spark_master_port>.
    spark_workers: int = Field(default=0, ge=0, le=16)
    spark_worker_cores: int = Field(default=1, ge=1)
    spark_worker_memory: str = "2g"
    spark_master_port: int = 7077
    spark_ui_port: int = 8090  # the master's web UI; worker i's is this + i
    spark_jars: Path = project_root() / "build" / "spark" / "jars"
    # The ETL's JVMs, driver and executors: the JIT's first tier only. A streaming ETL is
    # many short jobs, and the second tier's compilations took most of two cores for minutes
    # (freshness p99 11.4-12.5 s against 4.4-6.2 s, docs/performance-history.md); the first
    # tier alone needs the code cache the full JIT would have, or a driver fills it in ~43 s.
    # "" keeps the JVM's defaults (e.g. a long backfill on big executors). Under `spark-submit` the
    # driver's JVM is already running: pass these as its `--driver-java-options`.
    spark_jvm_options: str = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
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

    @field_validator("kafka_cpus", "worker_cpus")
    @classmethod
    def _cpu_list(cls, value: str, info: ValidationInfo) -> str:
        parse_cpus(value, str(info.field_name))
        return value

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
    def secure(self) -> bool:
        return self.kafka_security == "sasl_ssl"

    @property
    def secrets_dir(self) -> Path:
        return self.kafka_secrets_dir or self.home / "secrets"

    @property
    def ca_file(self) -> Path:
        return self.kafka_ca_file or self.home / "tls" / "ca.pem"

    def as_service(self, role: str) -> Settings:
        """These settings for a service: it connects as the principal named by its role,
        with that principal's password file, whatever user its environment names."""
        return self.model_copy(update={"kafka_user": role, "kafka_password": None})

    def kafka_secret(self) -> str:
        """The password of `kafka_user`: given, or read from its file."""
        if self.kafka_password is not None:
            return self.kafka_password.get_secret_value()
        path = self.secrets_dir / f"{self.kafka_user}.password"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            raise ValueError(
                f"no password for Kafka user {self.kafka_user!r}: set TXSTREAM_KAFKA_PASSWORD "
                f"or create {path}"
            ) from None

    def http_secret(self) -> str | None:
        """The bearer token the coordinator's endpoint, and the workers' endpoint for direct
        transactions, require, if any."""
        if self.http_token is not None:
            return self.http_token.get_secret_value()
        path = self.secrets_dir / "http.token"
        return path.read_text().strip() if self.secure and path.exists() else None

    @property
    def kafka_cpu_set(self) -> frozenset[int]:
        return parse_cpus(self.kafka_cpus, "kafka_cpus")

    @property
    def worker_cpu_set(self) -> frozenset[int]:
        return parse_cpus(self.worker_cpus, "worker_cpus")

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
