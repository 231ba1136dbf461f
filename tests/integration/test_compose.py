"""docker-compose.yml agrees with the repo and with the native stack.

No Docker engine runs here, so the file is checked the way docker-compose itself reads it:
`docker-compose config` (Debian's 1.29.2, installed by `make setup`) validates it and prints
the resolved config, with defaults filled in and paths made absolute; the tests read that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from txstream.config import Settings
from txstream.stack.broker import KafkaBroker

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_FILE = ROOT / "grafana" / "prometheus.yml"
COMPOSE = shutil.which("docker-compose")

# Broker settings without which Kafka transactions cannot work on a single node.
SINGLE_NODE_KEYS = (
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
)


def compose_binary() -> str:
    if COMPOSE is None:
        pytest.skip("docker-compose is not installed; `make setup` installs Debian's package")
    return COMPOSE


def compose(*args: str, grafana_password: bool = True) -> subprocess.CompletedProcess[str]:
    # Variables the file interpolates are dropped, so the defaults written in it are checked;
    # Grafana's admin password has none, so it is given unless `grafana_password` is False.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TXSTREAM_", "GRAFANA_", "COMPOSE_"))
    }
    if grafana_password:
        env["GRAFANA_ADMIN_PASSWORD"] = "a-test-password"
    return subprocess.run(
        [compose_binary(), "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def load_yaml(text: str) -> Any:
    """Parse YAML with the interpreter docker-compose runs on.

    The venv has no YAML library, but Debian's docker-compose is a Python script that depends
    on python3-yaml, so its interpreter (from the shebang) always has one.
    """
    binary = compose_binary()
    shebang = Path(binary).read_bytes().split(b"\n", 1)[0].decode()
    if not (shebang.startswith("#!") and "python" in shebang):
        pytest.fail(f"{binary} is not Debian's Python docker-compose; run `make setup`")
    interpreter = shebang[2:].split()
    code = "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"
    out = subprocess.run(
        [*interpreter, "-c", code], input=text, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@cache
def resolved() -> dict[str, Any]:
    result = compose("config")
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = load_yaml(result.stdout)
    return config


def services() -> dict[str, Any]:
    svcs: dict[str, Any] = resolved()["services"]
    return svcs


def dockerfile_of(build: dict[str, Any]) -> Path:
    """The Dockerfile a build section uses: relative to its context, which is absolute here."""
    dockerfile: str = build.get("dockerfile", "Dockerfile")
    return (Path(build["context"]) / dockerfile).resolve()


def built_from(prefix: str) -> dict[str, Path]:
    """Services built from a Dockerfile under `prefix` (repo-relative), by name."""
    return {
        name: dockerfile_of(svc["build"])
        for name, svc in services().items()
        if "build" in svc and dockerfile_of(svc["build"]).is_relative_to(ROOT / prefix)
    }


def mounts(svc: dict[str, Any]) -> dict[str, str]:
    """Container path -> source (absolute host path or volume name) of a service's volumes."""
    out = {}
    for v in svc.get("volumes", []):
        if isinstance(v, dict):
            out[v["target"]] = v["source"]
        else:
            source, target = v.split(":")[:2]
            out[target] = source
    return out


def host_ip(port: str | dict[str, Any]) -> str | None:
    """The host address a published port binds; None means every interface."""
    if isinstance(port, dict):
        return port.get("host_ip")
    parts = str(port).split("/")[0].rsplit(":", 2)  # [ip:]host:container, ip may be [v6]
    return parts[0].strip("[]") if len(parts) == 3 and parts[0] else None


def kafka_version_in_pom() -> str:
    pom = ET.parse(ROOT / "deps" / "kafka" / "pom.xml")
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = pom.findtext("m:properties/m:kafka.version", namespaces=ns)
    assert version, "deps/kafka/pom.xml has no <kafka.version> property"
    return version


def test_compose_file_is_valid() -> None:
    result = compose("config", "-q")
    assert result.returncode == 0, result.stderr


def test_kafka_image_is_the_native_broker_version() -> None:
    assert services()["kafka"]["image"] == f"apache/kafka:{kafka_version_in_pom()}"


def test_kafka_allows_transactions_on_one_node() -> None:
    text = KafkaBroker(Settings()).server_properties()
    native = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    env = services()["kafka"]["environment"]
    for key in SINGLE_NODE_KEYS:
        var = "KAFKA_" + key.upper().replace(".", "_")
        assert str(env.get(var)) == native[key], f"{var} differs from the native broker"


def test_every_build_uses_a_dockerfile_in_the_repo() -> None:
    builds = {name: svc["build"] for name, svc in services().items() if "build" in svc}
    assert {"worker", "sequencer", "coordinator", "spark"} <= builds.keys()
    for name, build in builds.items():
        dockerfile = dockerfile_of(build)
        assert dockerfile.is_relative_to(ROOT), f"{name}: {dockerfile} is outside the repo"
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"


def test_services_wait_for_a_healthy_kafka_and_use_its_internal_listener() -> None:
    svcs = services()
    assert svcs["kafka"]["healthcheck"]["test"], "kafka needs a healthcheck to be waited on"
    advertised = svcs["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    for name in built_from("services"):
        svc = svcs[name]
        assert svc["depends_on"]["kafka"]["condition"] == "service_healthy", name
        bootstrap = svc["environment"]["TXSTREAM_KAFKA_BOOTSTRAP"]
        assert f"://{bootstrap}" in advertised, f"{name}: {bootstrap} is not a kafka listener"


def test_every_published_port_binds_loopback() -> None:
    published = [(name, port) for name, svc in services().items() for port in svc.get("ports", [])]
    assert published, "the stack publishes no port at all"
    for name, port in published:
        assert host_ip(port) == "127.0.0.1", f"{name} publishes {port} beyond 127.0.0.1"


def test_prometheus_scrapes_every_service_and_only_services() -> None:
    config = load_yaml(PROMETHEUS_FILE.read_text())
    targets: set[str] = set()
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            targets |= {t.rsplit(":", 1)[0] for t in static["targets"]}
        for dns in job.get("dns_sd_configs", []):
            targets |= set(dns["names"])
    assert targets <= services().keys(), f"not compose services: {targets - services().keys()}"
    # Every service image from services/*/Dockerfile exports metrics and must be scraped.
    assert built_from("services").keys() <= targets


def test_prometheus_and_grafana_mount_their_config() -> None:
    svcs = services()
    prometheus = mounts(svcs["prometheus"])
    assert prometheus["/etc/prometheus/prometheus.yml"] == str(PROMETHEUS_FILE)

    grafana = mounts(svcs["grafana"])
    assert grafana["/etc/grafana/provisioning"] == str(ROOT / "grafana" / "provisioning")
    dashboards = load_yaml((ROOT / "grafana/provisioning/dashboards/dashboards.yml").read_text())
    paths = {p["options"]["path"] for p in dashboards["providers"]}
    for path in paths:
        assert grafana.get(path) == str(ROOT / "grafana" / "dashboards"), path

    datasources = load_yaml((ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text())
    for source in datasources["datasources"]:
        assert urlsplit(source["url"]).hostname in svcs, f"{source['url']} is not in the stack"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("127.0.0.1:9092:9092/tcp", "127.0.0.1"),
        ("[::1]:3000:3000", "::1"),
        ("9092:9092", None),
        ("9092", None),
        ({"host_ip": "127.0.0.1", "published": 1, "target": 1}, "127.0.0.1"),
        ({"published": 1, "target": 1}, None),
    ],
)
def test_host_ip_parses_port_specs(spec: str | dict[str, Any], expected: str | None) -> None:
    assert host_ip(spec) == expected


def test_workers_scale_out() -> None:
    """`docker compose up --scale worker=N`: replicas need distinct names, ports and
    instance ids. Each container's host name differs, so each takes its own `<host>-1`
    slot; nothing in the service may pin one name, port or id for all of them."""
    worker = resolved()["services"]["worker"]
    assert "container_name" not in worker
    assert not worker.get("ports"), "a published port would collide between replicas"
    assert "hostname" not in worker
    assert "TXSTREAM_WORKER_ID" not in (worker.get("environment") or {})


def test_grafana_has_no_default_admin_password() -> None:
    refused = compose("config", grafana_password=False)
    assert refused.returncode != 0
    assert "GRAFANA_ADMIN_PASSWORD" in refused.stderr
    grafana = load_yaml(compose("config").stdout)["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "a-test-password"


def test_the_spark_cluster_is_the_native_stacks_and_opt_in() -> None:
    """A master and two one-core workers, from the ETL's image, behind a profile; the ETL
    stays in local mode unless TXSTREAM_SPARK_MASTER names the cluster."""
    svcs = services()
    image = svcs["spark"]["image"]
    assert "build" in svcs["spark"] and image
    master = svcs["spark-master"]
    assert master["image"] == image and master["profiles"] == ["spark-cluster"]
    assert "org.apache.spark.deploy.master.Master" in master["command"]
    workers = [n for n in svcs if n.startswith("spark-worker-")]
    assert len(workers) == 2
    for name in workers:
        worker = svcs[name]
        assert worker["image"] == image and worker["profiles"] == ["spark-cluster"]
        command = worker["command"]
        assert command[-1] == "spark://spark-master:7077", name
        assert command[command.index("--cores") + 1] == str(Settings().spark_worker_cores)
        assert command[command.index("--memory") + 1] == Settings().spark_worker_memory
        assert mounts(worker)["/warehouse"] == mounts(svcs["spark"])["/warehouse"], name
    assert svcs["spark"]["environment"]["TXSTREAM_SPARK_MASTER"] == Settings().spark_master


def test_the_etl_driver_runs_with_the_settings_jvm_options() -> None:
    """spark-submit starts the driver's JVM before the job reads its settings, so the
    compose command passes them itself: the same as the native stack's default."""
    command = services()["spark"]["command"]
    options = command[command.index("--driver-java-options") + 1]
    assert options == Settings().spark_jvm_options
