"""The secured stack, on a real broker of its own: SCRAM over TLS, per-principal ACLs.

One secured broker for the module, in a private home with free ports (its CA, certificate
and passwords are made by the stack itself, as `txstream stack up` makes them).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pydantic import SecretStr

from leaderboard import WAREHOUSE_CONFIG
from leaderboard.dataflow import Params
from leaderboard.votegen import write_votes_file
from tests.integration.test_etl_warehouse import rows as delta_rows
from tests.integration.test_quickstart import quickstart_script, run_shell
from tests.support.kafka_env import free_port
from tests.support.leaderboard_driver import drive, load_inputs, new_app
from txstream.config import Settings
from txstream.kafka.acls import app_acls, grant
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import common_config, transactional_producer_config
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.runtime.task import PartitionTask
from txstream.stack.broker import KafkaBroker
from txstream.stack.security import PRINCIPALS

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

ROOT = Path(__file__).parents[2]
TXSTREAM = str(ROOT / ".venv/bin/txstream")
SECURITY_GUIDE = ROOT / "docs/guides/security.md"
SECTION = "## Security: TLS, SCRAM and ACLs"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    home = tmp_path_factory.mktemp("secure-home")
    settings = Settings(home=home, kafka_port=free_port(), kafka_controller_port=free_port(),
                        kafka_security="sasl_ssl")  # fmt: skip
    broker = KafkaBroker(settings)
    broker.start()
    try:
        yield settings
    finally:
        broker.process.stop()


def env_of(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "TXSTREAM_HOME": str(settings.home),
        "TXSTREAM_KAFKA_PORT": str(settings.kafka_port),
        "TXSTREAM_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "TXSTREAM_KAFKA_SECURITY": "sasl_ssl",
        **extra,
    }


def refusal(settings: Settings) -> list[KafkaError]:
    """The errors a client with these settings meets asking for the cluster's metadata,
    which it must not get."""
    seen: list[KafkaError] = []
    conf = {**common_config(settings), "reconnect.backoff.max.ms": 500, "error_cb": seen.append}
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # serves the error callbacks
    return seen


def test_the_secrets_are_random_and_readable_by_their_owner_only(secured: Settings) -> None:
    files = [secured.secrets_dir / f"{p}.password" for p in PRINCIPALS]
    files += [secured.secrets_dir / "http.token", secured.home / "tls" / "node.pem"]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    passwords = [path.read_text().strip() for path in files[: len(PRINCIPALS)]]
    assert len(set(passwords)) == len(PRINCIPALS)
    assert all(len(p) >= 24 for p in passwords)


def test_a_client_without_tls_or_with_a_wrong_password_is_refused(secured: Settings) -> None:
    client = secured.as_service("client")
    assert TopicAdmin(client).list_topics() is not None  # the right password is taken
    plain = client.model_copy(update={"kafka_security": "plaintext"})
    refusal(plain)  # the TLS listener drops a plaintext connection
    wrong = client.model_copy(update={"kafka_password": SecretStr("not-the-password")})
    assert any(e.code() == KafkaError._AUTHENTICATION for e in refusal(wrong))


def try_commit(settings: Settings, principal: str, topic: str) -> KafkaError | None:
    """One record to `topic` in a transaction as `principal`: None if it committed."""
    conf = transactional_producer_config(settings.as_service(principal), f"probe-{uuid.uuid4()}")
    producer = Producer(conf)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"forged", partition=0)
    producer.flush(30)
    try:
        producer.commit_transaction(30)
    except KafkaException as e:  # the producer is dropped: nothing to abort for
        error: KafkaError = e.args[0]
        return error
    return None


def test_only_the_coordinator_writes_decisions_and_clients_only_their_inputs(
    secured: Settings,
) -> None:
    name = f"bank-{uuid.uuid4().hex[:8]}"
    topics = AppTopics(name)
    ensure_topics(TopicAdmin(secured.as_service("admin")), topics, ["payroll", "audit"], 1,
                  oltp=True)  # fmt: skip
    spec = ["--app", "bank.dataflow:from_params", "--params", json.dumps({"name": name})]
    done = subprocess.run([TXSTREAM, "acl", "apply", *spec], env=env_of(secured),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"User:worker DENY WRITE TOPIC LITERAL '{topics.decisions}'" in done.stdout
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    for principal in ("worker", "sequencer", "client"):
        error = try_commit(secured, principal, topics.decisions)
        assert error is not None and error.code() == denied, (principal, error)
    assert try_commit(secured, "coordinator", topics.decisions) is None
    assert try_commit(secured, "client", topics.stream("payroll")) is None
    for forged in (topics.changelog, topics.requests, topics.oltp_out):
        error = try_commit(secured, "client", forged)
        assert error is not None and error.code() == denied, forged


def test_acl_apply_needs_a_secured_cluster(tmp_path: Path) -> None:
    env = {**os.environ, "TXSTREAM_HOME": str(tmp_path), "TXSTREAM_KAFKA_SECURITY": "plaintext"}
    done = subprocess.run([TXSTREAM, "acl", "apply", "--app", "bank.dataflow:from_params"],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "not secured" in done.stderr


def security_script() -> str:
    text = SECURITY_GUIDE.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = "\n".join(part.split("```", 1)[0] for part in text.split("```sh\n")[1:])
    assert blocks.count("txstream stack up\n") == 1
    return blocks.replace("txstream stack up\n", "")


@pytest.mark.slow  # a secured stack, as the guide runs it (~25 s): make faults
def test_the_security_guide_runs_as_written(secured: Settings, tmp_path: Path) -> None:
    """The Quickstart's app (its first blocks: files and `describe`, no Kafka), then the
    section's commands against the secured broker, which stands in for `stack up`."""
    quickstart = quickstart_script().split("txstream worker run", 1)[0]
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    returncode, out = run_shell(quickstart + security_script(), tmp_path, env_of(secured))
    assert returncode == 0, out
    lines = out.splitlines()
    assert (
        '{"stream": "page_views", "batch_id": 1, "tuples": [{"page": "/home", "views": 1}]}'
        in lines
    ), out
    assert "Topic authorization failed" in out, out
    assert "refused: a client cannot write a procedure's output" in lines, out


@pytest.mark.spark
@pytest.mark.slow  # a Spark job over TLS (~50 s): runs in make faults
def test_the_warehouse_etl_reads_a_secured_cluster_as_a_client(
    secured: Settings, tmp_path: Path
) -> None:
    """The Leaderboard's engine writes as `worker`, votes come in as `client`, and the
    Spark ETL (`--once`) loads the committed votes into Delta as `client`, over TLS."""
    app = new_app(Params(contestants=5, threshold=100, window=20, slide=5))
    admin = secured.as_service("admin")
    ensure_topics(TopicAdmin(admin), AppTopics(app.name), app.decl.streams, 1)
    grant(AdminClient(common_config(admin)), app_acls(AppTopics(app.name),
                                                      app.dataflow().border_streams))  # fmt: skip
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 300, contestants=5, seed=3)
    last = load_inputs(secured.as_service("client"), app, votes, batch_size=1)
    task = PartitionTask(app, 0, secured.as_service("worker"))
    try:
        drive(task, last, timeout_s=120)
        accepted = int(task.tables()["stats"][("accepted",)]["value"])
    finally:
        task.close()
    warehouse = tmp_path / "wh"
    done = subprocess.run(
        [TXSTREAM, "etl", "run", "--app", app.name, "--config", str(WAREHOUSE_CONFIG), "--once",
         "--no-metrics"],
        env=env_of(secured, TXSTREAM_WAREHOUSE_URI=str(warehouse)),
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert accepted > 0
    assert len(delta_rows(warehouse / app.name, "votes")) == accepted
