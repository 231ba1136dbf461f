"""The console's routes over stand-ins: the page and its assets, open 2PC transactions from a
real coordinator state machine, the graph drawn by Graphviz, Prometheus unreachable named as
such, the token, and the order of table rows. The page in a browser, over real services:
tests/integration/test_console.py."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bank.dataflow import build_app
from tests.support.http_json import http
from tests.support.kafka_env import free_port
from tests.unit.coordinator.test_coordinator_protocol import coordinator, start_2pc, vote
from tests.unit.services.test_gateway import StandIn
from txstream.config import Settings
from txstream.model.declarations import Key, Record
from txstream_coordinator.console import ConsoleSources
from txstream_coordinator.console.sources import open_transactions
from txstream_coordinator.console.tables import ordered
from txstream_coordinator.coordinator import Coordinator
from txstream_coordinator.gateway import Gateway, serve


def start(machine: Coordinator | None, tmp: Path, token: str | None = None) -> tuple[str, Gateway]:
    settings = Settings(home=tmp, prometheus_port=free_port())  # nothing listens there
    sources = ConsoleSources(build_app(), settings, 3, lambda: machine)
    gateway = serve(StandIn(), "127.0.0.1", 0, token, sources)  # type: ignore[arg-type]
    return f"http://127.0.0.1:{gateway.server.servers[0].sockets[0].getsockname()[1]}", gateway


@pytest.fixture
def machine() -> Coordinator:
    c = coordinator()
    txn_id = start_2pc(c, now=10.0)
    c.reply(vote(txn_id, 2), 10.1)
    return c


@pytest.fixture
def console(machine: Coordinator, tmp_path: Path) -> Iterator[str]:
    base, gateway = start(machine, tmp_path)
    yield base
    gateway.server.should_exit = True
    gateway.thread.join(10)


def fetch(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.status, answer.headers["Content-Type"], answer.read()


def test_the_page_and_its_assets_are_served(console: str) -> None:
    status, kind, body = fetch(f"{console}/console")
    assert (status, kind.split(";")[0]) == (200, "text/html")
    for asset in ("/console/static/console.js", "/console/static/console.css"):
        assert asset.encode() in body
        assert fetch(console + asset)[0] == 200


def test_overview_and_open_transactions_come_from_the_machine(console: str) -> None:
    status, doc = http(f"{console}/console/api/overview")
    assert status == 200
    assert (doc["app"], doc["partitions"], doc["serving"]) == ("bank", 3, True)
    assert "accounts" in doc["tables"]
    status, doc = http(f"{console}/console/api/transactions")
    assert status == 200 and doc["serving"] is True
    (txn,) = doc["open"]
    assert txn["participants"] == [0, 1, 2]
    assert (txn["voted_yes"], txn["decision"], txn["acknowledged"]) == ([2], None, [])


def test_a_standby_shows_no_transactions_and_says_so(tmp_path: Path) -> None:
    base, gateway = start(None, tmp_path)
    try:
        assert http(f"{base}/console/api/transactions") == (200, {"serving": False, "open": []})
    finally:
        gateway.server.should_exit = True
        gateway.thread.join(10)


def test_the_graph_is_an_svg_drawn_by_graphviz(console: str) -> None:
    status, kind, body = fetch(f"{console}/console/api/graph.svg")
    assert (status, kind) == (200, "image/svg+xml")
    assert b"<svg" in body and b">withhold<" in body  # a bank procedure, drawn


def test_prometheus_unreachable_is_a_503_naming_it(console: str) -> None:
    status, doc = http(f"{console}/console/api/procedures")
    assert status == 503
    assert (
        doc["error"].startswith("Prometheus at http://127.0.0.1:")
        and "did not answer" in doc["error"]
    )


def test_with_a_token_the_data_needs_it_and_the_page_does_not(
    machine: Coordinator, tmp_path: Path
) -> None:
    base, gateway = start(machine, tmp_path, token="s3cret")
    try:
        assert fetch(f"{base}/console")[0] == 200
        assert http(f"{base}/console/api/transactions")[0] == 401
        assert http(f"{base}/console/api/transactions", token="s3cret")[0] == 200
    finally:
        gateway.server.should_exit = True
        gateway.thread.join(10)


def test_transactions_are_listed_in_the_state_they_reached(machine: Coordinator) -> None:
    (txn,) = open_transactions(machine, now=10.5)
    deadline = machine.active[txn["txn_id"]].deadline
    assert txn["timeout_in_s"] == round(deadline - 10.5, 1)
    for part in (0, 1):
        machine.reply(vote(txn["txn_id"], part), 10.6)
    (txn,) = open_transactions(machine, now=10.7)  # decided, not yet acknowledged
    assert (txn["voted_yes"], txn["decision"]) == ([0, 1, 2], "commit")


def test_rows_are_ordered_by_a_column_with_those_lacking_it_last() -> None:
    rows: list[tuple[Key, Record]] = [
        ((1,), {"n": 5}),
        ((2,), {"n": 9}),
        ((3,), {}),
        ((4,), {"n": 7}),
    ]
    assert [k for k, _ in ordered(rows, "n", True, 10)] == [(2,), (4,), (1,), (3,)]
    assert [k for k, _ in ordered(rows, "n", False, 2)] == [(1,), (4,)]
    assert [k for k, _ in ordered(rows, None, True, 10)] == [(4,), (3,), (2,), (1,)]
    mixed: list[tuple[Key, Record]] = [((1,), {"n": "b"}), ((2,), {"n": 3})]
    assert [k for k, _ in ordered(mixed, "n", False, 10)] == [(2,), (1,)]  # as text: "3" < "b"
