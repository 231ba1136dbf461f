"""Security settings: client configs, the secured broker's properties, an app's ACLs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from txstream.config import Settings
from txstream.kafka.acls import app_acls, describe
from txstream.kafka.clients import common_config
from txstream.kafka.topics import AppTopics
from txstream.stack.broker import KafkaBroker
from txstream.stack.security import PRINCIPALS, ensure_secrets


def secured(home: Path) -> Settings:
    return Settings(home=home, kafka_security="sasl_ssl")


def test_plaintext_clients_carry_no_credentials(tmp_path: Path) -> None:
    conf = common_config(Settings(home=tmp_path))
    assert not any(k.startswith(("sasl.", "ssl.", "security.")) for k in conf)


def test_a_secured_client_takes_its_principals_password_file(tmp_path: Path) -> None:
    settings = secured(tmp_path)
    ensure_secrets(settings)
    conf = common_config(settings.as_service("worker"))
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "worker"
    assert conf["sasl.password"] == (tmp_path / "secrets/worker.password").read_text().strip()
    assert conf["ssl.ca.location"] == str(tmp_path / "tls/ca.pem")


def test_a_service_connects_as_its_role_whatever_its_environment_says(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, kafka_user="client", kafka_password=SecretStr("given"))
    worker = settings.as_service("worker")
    assert (worker.kafka_user, worker.kafka_password) == ("worker", None)
    assert settings.kafka_secret() == "given"


def test_a_missing_password_names_the_variable_and_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="TXSTREAM_KAFKA_PASSWORD") as raised:
        common_config(secured(tmp_path).as_service("coordinator"))
    assert str(tmp_path / "secrets/coordinator.password") in str(raised.value)


def test_secrets_are_made_once(tmp_path: Path) -> None:
    settings = secured(tmp_path)
    ensure_secrets(settings)
    first = {p: (tmp_path / f"secrets/{p}.password").read_text() for p in PRINCIPALS}
    ensure_secrets(settings)
    assert first == {p: (tmp_path / f"secrets/{p}.password").read_text() for p in PRINCIPALS}
    assert settings.http_secret() == (tmp_path / "secrets/http.token").read_text().strip()
    assert Settings(home=tmp_path).http_secret() is None  # plaintext: no token unless set


def test_the_secured_broker_has_no_plaintext_listener_and_an_authorizer(tmp_path: Path) -> None:
    settings = secured(tmp_path)
    ensure_secrets(settings)
    props = KafkaBroker(settings).server_properties()
    assert "PLAINTEXT" not in props
    assert "listeners=SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9192" in props
    assert "allow.everyone.if.no.acl.found=false" in props
    assert "StandardAuthorizer" in props
    plain = KafkaBroker(Settings(home=tmp_path)).server_properties()
    assert "SASL" not in plain and "authorizer" not in plain


def bindings(topics: AppTopics, principal: str) -> list[list[str]]:
    """[permission, operation, resource type, pattern, name] of each topic binding."""
    lines = [describe(acl).split() for acl in app_acls(topics, ["payroll"])]
    return [[*w[1:5], w[5].strip("'")] for w in lines if w[0] == f"User:{principal}"
            and w[3] == "TOPIC"]  # fmt: skip


def rights(topics: AppTopics, principal: str, topic: str) -> set[tuple[str, str]]:
    """(permission, operation) pairs that name `topic`, literally or by prefix."""
    return {
        (permission, operation)
        for permission, operation, _, pattern, name in bindings(topics, principal)
        if name == topic or (pattern == "PREFIXED" and topic.startswith(name))
    }


def test_only_the_coordinator_may_write_requests_decisions_and_its_log() -> None:
    topics = AppTopics("bank")
    for topic in (topics.requests, topics.decisions, topics.coordinator_log):
        assert ("DENY", "WRITE") in rights(topics, "worker", topic)
        assert ("DENY", "WRITE") in rights(topics, "sequencer", topic)
        assert ("ALLOW", "WRITE") not in rights(topics, "client", topic)
        assert rights(topics, "coordinator", topic) == {("ALLOW", "ALL")}


def test_a_client_writes_only_inbound_streams_oltp_requests_and_promises() -> None:
    topics = AppTopics("bank")
    writable = {
        name
        for permission, operation, _, _, name in bindings(topics, "client")
        if (permission, operation) == ("ALLOW", "WRITE")
    }
    # promises go straight to the engines, which take nothing but promises from there
    assert writable == {"bank.payroll", "bank.oltp.in", "bank.promises"}
    assert ("ALLOW", "READ") in rights(topics, "client", topics.stream("audit"))
