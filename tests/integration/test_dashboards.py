"""Every panel of every dashboard shows data, through a real Prometheus scraping real services.

A short workload runs on the real broker: the Leaderboard through the sequencer (window
slides, rejected votes, a malformed event that is dead-lettered) and the bank through the
coordinator (single-partition and 2PC transfers, an overdraft that aborts, a payroll batch).
Every service registers its metrics target; the native stack's Prometheus discovers them.
Then every PromQL expression of every panel is evaluated over the run through the HTTP API
(those of the ETL's panels in test_etl_warehouse.py, which runs the ETL job).
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

import pytest

from leaderboard.commits import wait_for_batches
from leaderboard.dataflow import Params
from leaderboard.loader import Loader, load_raw_votes
from leaderboard.votegen import write_votes_file
from tests.support.bank_cluster import BankCluster
from tests.support.leaderboard_driver import new_app
from tests.support.panels import (
    addresses,
    panel_exprs,
    panels_without_data,
    wait_until_scraped,
    wait_until_serving,
)
from tests.support.sequencer_driver import (
    SequencerProcess,
    produce_events,
    read_dead_letters,
    wait_until,
    write_config,
)
from tests.support.service_process import ServiceProcess
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics
from txstream.observability.targets import live_targets
from txstream.stack.prometheus import PrometheusServer

pytestmark = pytest.mark.kafka

PARAMS = Params(contestants=12, threshold=200, window=20, slide=2)
VOTES = 600


@pytest.fixture
def settings(scraped: Settings) -> Settings:
    return scraped


def run_leaderboard(
    settings: Settings, tmp: Path, started: list[ServiceProcess], prometheus: PrometheusServer
) -> None:
    app = new_app(PARAMS)
    Loader(settings, app).load_reference_data()
    raw = f"{app.name}.raw_votes"
    TopicAdmin(settings).create_topic(raw, 1)
    params = json.dumps({**asdict(PARAMS), "name": app.name})
    worker_args = ["worker", "run", "--app", "leaderboard.dataflow:from_params", "--params", params]
    started.append(ServiceProcess(settings, worker_args, tmp / "lb-worker.log"))
    route = {"topic": raw, "app": app.name, "stream": "votes", "schema": "leaderboard.Vote",
             "batch_id_field": "batch_id", "seal_after_ms": 50}  # fmt: skip
    config = write_config(tmp / "sequencer.toml", app.name, [route])
    started.append(SequencerProcess(settings, config, tmp / "sequencer.log"))
    wait_until_serving(settings, prometheus, {"worker": 2, "sequencer": 1})
    votes = tmp / "votes.txt"
    write_votes_file(votes, VOTES, PARAMS.contestants, seed=3)
    last = load_raw_votes(settings, raw, votes, batch_size=1)
    produce_events(settings, raw, [b"{not json"])
    topics = AppTopics(app.name)
    wait_for_batches(settings, topics.commits, {"votes": last}, 180, lambda: all_alive(started))
    # The malformed event follows the last vote, so the last commit does not show it: the
    # work has ended once its dead letter is out (and counted).
    dead = f"txstream-sequencer-{app.name}.dead_letters"
    wait_until(lambda: bool(read_dead_letters(settings, dead)), 60,
               lambda: all_alive(started), "the malformed event's dead letter")  # fmt: skip


def run_bank(cluster: BankCluster, prometheus: PrometheusServer) -> None:
    cluster.worker()
    cluster.coordinator()
    wait_until_serving(cluster.settings, prometheus, {"worker": 1, "coordinator": 1})
    with cluster.client() as client:
        a, b = cluster.accounts_apart()
        c = cluster.account_on(0)
        d = cluster.account_on(0)
        cluster.open(client, a, b, c, d)
        for n in range(5):
            assert BankCluster.transfer(client, a, b, 1).ok  # 2PC
            assert BankCluster.transfer(client, c, d, 1).ok  # one engine
            if n == 0:
                # A latency quantile needs its histogram to grow between two scrapes: the
                # engine is fast enough to run the whole workload between two otherwise.
                wait_until_scraped(prometheus, addresses(cluster.settings), time.time())
        overdraft = BankCluster.transfer(client, a, b, 10_000)
        assert not overdraft.ok and overdraft.reason == "constraint_violation", overdraft
        cluster.payroll(0, 1, [(c, d, 5)])
        assert BankCluster.totals(client)["count"] == 4


def all_alive(processes: list[ServiceProcess]) -> bool:
    return all(p.alive() for p in processes)


def test_every_panel_shows_data_from_a_real_prometheus(
    settings: Settings, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    began = time.time()
    started: list[ServiceProcess] = []
    cluster = BankCluster(settings, tmp_path)
    try:
        run_bank(cluster, prometheus)
        run_leaderboard(settings, tmp_path, started, prometheus)
        jobs = {t.job for t in live_targets(settings)}
        assert {"worker", "sequencer", "coordinator"} <= jobs, jobs
        # The ETL's panels are checked with the ETL job, in test_etl_warehouse.py.
        exprs = panel_exprs(lambda expr: "txstream_etl_" not in expr)
        missing = panels_without_data(prometheus, settings, exprs, began)
        assert not missing, "panels without data:\n" + "\n".join(missing)
        assert_top_shows_the_workload(settings, tmp_path)
    finally:
        for proc in started:
            proc.kill()
        cluster.stop_all()


def assert_top_shows_the_workload(settings: Settings, tmp: Path) -> None:
    """`txstream top` finds the same services by their registrations and shows each
    procedure, with the bank's overdraft as an abort by reason."""
    out = tmp / "top.txt"
    wide = {"COLUMNS": "200"}  # rich truncates cells to fit 80 columns when not on a terminal
    ServiceProcess(settings, ["top", "--once", "--interval", "1"], out, wide).wait_exit(60)
    text = out.read_text()
    for shown in ("validate", "maintain_leaderboard", "debit", "credit", "2pc_committed",
                  "direct_committed", "constraint_violation", "4 targets"):  # fmt: skip
        assert shown in text, f"{shown!r} not in `txstream top`:\n{text}"


def test_the_alert_rules_are_loaded(prometheus: PrometheusServer) -> None:
    """The native stack's Prometheus evaluates our alert rules (their logic is tested with
    promtool in tests/unit/observability/test_alert_rules.py)."""
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/rules", timeout=10) as resp:
        groups = json.load(resp)["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {r["name"] for r in rules} == {
        "TxstreamServiceDown", "TxstreamCommitSlow", "TxstreamInputLag",
        "TxstreamDeadLetters", "TxstreamSequencerDeadLetters", "Txstream2PCStuck",
    }  # fmt: skip
    assert all(r["type"] == "alerting" and r["health"] != "err" for r in rules), rules
