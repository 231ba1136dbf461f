"""The Leaderboard, then the Spark ETL into Delta, SIGKILLed mid-stream and restarted.

One engine run commits the Leaderboard's state; bad records are then added to its committed
`accepted_votes` topic, and dirty raw events (CSV and two JSON dialects, some malformed) to a
raw topic. The ETL (a real `txstream etl run`: Spark local mode, Kafka read_committed, Delta)
is killed with SIGKILL by pid once it has committed part of the stream, and restarted on the
same checkpoint and warehouse. The tables, read back with `deltalake` (no Spark), must then
equal the engine's committed state: no row twice, none missing, bad rows quarantined.

Short in `make test` (one kill); `make faults` adds a kill between two table commits of one
micro-batch (failpoint `etl.after_table_commit`), the window the Delta idempotent-write
markers exist for, more votes, and `etl maintain` over the caught-up warehouse.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from leaderboard import WAREHOUSE_CONFIG
from leaderboard.dataflow import Params
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from tests.support.kafka_env import KafkaEnv, free_port
from tests.support.leaderboard_driver import drive, load_inputs, new_app
from tests.support.panels import panel_exprs, panels_without_data, wait_until_serving
from tests.support.scale import LONG, scaled
from tests.support.service_process import ServiceProcess
from tests.support.spark_jvms import command_line, gone, spark_jvms
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import send, transactional_producer_config
from txstream.kafka.topics import AppTopics
from txstream.runtime.task import PartitionTask
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.prometheus import PrometheusServer
from txstream_etl.epochs import tables_at

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.faults]

PARAMS = Params(contestants=12, threshold=300, window=100, slide=10)
VOTES = scaled(2000, 8000)
BATCHES_PER_TRIGGER = scaled(700, 1000)
DEADLINE_S = 420.0

# Records added to the committed accepted_votes topic: not engine output, so quarantined.
BAD_STATE = {"vote_id": 10**9, "phone_number": 6175550101, "contestant_number": 1, "state": "x1"}
GARBAGE = b"\x00\x01 not an envelope"

# Raw events and what each must become: a normalized row, or a quarantine reason.
DIRTY: list[tuple[bytes, dict[str, Any] | str]] = [
    (b"1,(617) 555-0101,3,2026-11-22T07:00:00Z",
     {"vote_id": 1, "phone_number": 6175550101, "contestant_number": 3,
      "cast_at": "2026-11-22T07:00:00", "source_format": "csv"}),
    (b" 2 , +1 212 555 0199 , 4 , 2026-11-22T09:30:00+02:00 ",
     {"vote_id": 2, "phone_number": 2125550199, "contestant_number": 4,
      "cast_at": "2026-11-22T07:30:00", "source_format": "csv"}),
    (b'{"voteId": "3", "phone": "617.555.0102", "contestant": 5, "castAtMs": 1763794800500}',
     {"vote_id": 3, "phone_number": 6175550102, "contestant_number": 5,
      "cast_at": "2025-11-22T07:00:00.500000", "source_format": "json-web"}),
    (b'{"id": 4, "msisdn": "16175550103", "candidate": "6", "ts": 1763794800}',
     {"vote_id": 4, "phone_number": 6175550103, "contestant_number": 6,
      "cast_at": "2025-11-22T07:00:00", "source_format": "json-sms"}),
    (b"vote_id,phone_number,contestant_number,cast_at", "unparseable"),
    (b"5,6175550104,3", "unparseable"),
    (b'{"voteId": 6, "phone": "6175550105", "contestant": 3, "castAtMs": ', "unparseable"),
    (b'{"id": 7, "msisdn": "6175550106", "candidate": 3, "ts": 1763794800000}', "bad_timestamp"),
    (b'{"id": 8, "msisdn": "555-0107", "candidate": 3, "ts": 1763794800}', "bad_phone_number"),
    (b'{"id": 9, "candidate": 3, "ts": 1763794800}', "unknown_format"),
    (b'{"voteId": 10, "phone": "6175550108", "castAtMs": 1763794800000}', "missing_field"),
    (b"11,6175550109,three,2026-11-22T07:00:00Z", "bad_number"),
    (b"12,6175550110,0,2026-11-22T07:00:00Z", "bad_contestant_number"),
    (b"\xff\xfe13,6175550111,3,2026-11-22T07:00:00Z", "not_utf8"),
]  # fmt: skip


@dataclass
class EngineRun:
    app: str
    tables: dict[str, Any]
    raw_topic: str

    @property
    def accepted(self) -> int:
        return int(self.tables["stats"][("accepted",)]["value"])


@dataclass
class EtlRun:
    warehouse: Path
    settings: Settings  # a private home: the ETL registers its metrics target there
    prometheus: PrometheusServer  # scraping it, for the ETL dashboard's panels
    began: float = field(default_factory=time.time)
    killed_at_rows: list[int] = field(default_factory=list)  # votes landed when killed
    metrics: str = ""
    logs: list[Path] = field(default_factory=list)
    running: ServiceProcess | None = None  # the run that caught up
    jvm_args: list[list[str]] = field(default_factory=list)  # the Spark JVMs' command lines


def rows(root: Path, table: str) -> list[dict[str, Any]]:
    """A Delta table's current rows, read by delta-rs's own query engine.

    Not `DeltaTable.to_pyarrow_table()`: with pyarrow 26 its scan threads often abort the
    interpreter at exit ("terminate called without an active exception").
    """
    reader = QueryBuilder().register("t", DeltaTable(str(root / table))).execute("SELECT * FROM t")
    return list(pa.table(reader.read_all()).to_pylist())


def rows_or_empty(root: Path, table: str) -> list[dict[str, Any]]:
    try:
        return rows(root, table)
    except TableNotFoundError:
        return []


def poll(what: str, check: Callable[[], bool], deadline: float, alive: Callable[[], bool]) -> None:
    while time.monotonic() < deadline:
        if check():
            return
        if not alive():
            raise AssertionError(f"the ETL exited while waiting for {what}")
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def engine(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> EngineRun:
    settings = kafka.settings
    votes = tmp_path_factory.mktemp("etl") / "votes.txt"
    write_votes_file(votes, VOTES, contestants=PARAMS.contestants, seed=7)
    app = new_app(PARAMS)
    last = load_inputs(settings, app, votes, batch_size=1)
    task = PartitionTask(app, 0, settings)
    try:
        drive(task, last, timeout_s=300)
        tables = task.tables()
    finally:
        task.close()

    raw_topic = f"etl-raw-{uuid.uuid4().hex[:10]}"
    TopicAdmin(settings).create_topic(raw_topic, 1)
    producer = Producer(transactional_producer_config(settings, f"etl-test-{raw_topic}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    accepted = SchemaRegistry(settings.schema_dir).get("leaderboard.AcceptedVote")
    topic = AppTopics(app.name).stream("accepted_votes")
    send(producer, topic, BatchCodec(accepted).encode("accepted_votes", 10**6, [BAD_STATE]))
    send(producer, topic, GARBAGE)
    for payload, _ in DIRTY:
        send(producer, raw_topic, payload)
    producer.commit_transaction(30)
    return EngineRun(app.name, tables, raw_topic)


def etl_process(
    engine: EngineRun, run: EtlRun, n: int, *options: str, **env: str
) -> tuple[ServiceProcess, list[str]]:
    log = run.warehouse.parent / f"etl-{n}.log"
    run.logs.append(log)
    args = ["etl", "run", "--app", engine.app, "--config", str(WAREHOUSE_CONFIG),
            "--raw-topic", engine.raw_topic,
            "--trigger-s", "0.5", "--max-batches-per-trigger", str(BATCHES_PER_TRIGGER),
            "--metrics-port", str(free_port()), *options]  # fmt: skip
    return ServiceProcess(run.settings, args, log, {**spark_env(run), **env}), args


def spark_env(run: EtlRun) -> dict[str, str]:
    """An `etl` command's environment: the run's warehouse."""
    return {"TXSTREAM_WAREHOUSE_URI": str(run.warehouse)}


def done(root: Path, engine: EngineRun) -> bool:
    """Everything landed, and the micro-batch of the last snapshot is recorded too."""
    snapshots = rows_or_empty(root, "leaderboard_snapshots")
    newest = max(snapshots, key=lambda s: s["etl_batch"]) if snapshots else None
    recorded = {(c["query"], c["etl_batch"]) for c in rows_or_empty(root, "etl_commits")}
    return (
        len(rows_or_empty(root, "votes")) >= engine.accepted
        and len(rows_or_empty(root, "ingested_votes")) >= 4
        and len(rows_or_empty(root, "quarantine")) >= sum(isinstance(e, str) for _, e in DIRTY) + 2
        and newest is not None
        and json.loads(newest["document"]) == result_document(engine.tables)
        and ("changelog", newest["etl_batch"]) in recorded
    )


@pytest.fixture(scope="module")
def etl(
    kafka: KafkaEnv, engine: EngineRun, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EtlRun]:
    tmp = tmp_path_factory.mktemp("warehouse")
    settings = kafka.settings.model_copy(
        update={"home": tmp / "home", "prometheus_port": free_port(),
                "prometheus_scrape_interval_s": 0.5}
    )  # fmt: skip
    run = EtlRun(tmp / "wh", settings, PrometheusServer(settings))
    root = run.warehouse / engine.app
    deadline = time.monotonic() + DEADLINE_S
    started: list[ServiceProcess] = []
    run.prometheus.start()
    try:
        if LONG:
            # Killed by its own failpoint right after its third table commit: some tables of
            # a micro-batch hold it, the others do not, and Spark has not recorded it.
            proc, _ = etl_process(
                engine, run, 0, TXSTREAM_FAILPOINTS="etl.after_table_commit=kill@3"
            )
            started.append(proc)
            assert proc.wait_exit(DEADLINE_S) == -signal.SIGKILL
            assert gone(engine.app, 60), "Spark outlived its killed driver"

        def streams_batches() -> int:
            return sum(c["query"] == "streams" for c in rows_or_empty(root, "etl_commits"))

        # The killed run may have recorded a streams micro-batch before its third commit.
        before = streams_batches()
        # Its fact micro-batches written by Spark's executors, the next run's by the driver.
        proc, _ = etl_process(engine, run, 1, "--driver-rows", "0")
        started.append(proc)

        def streamed_part() -> bool:
            return streams_batches() > before

        poll("a first streams micro-batch", streamed_part, deadline, proc.alive)
        run.jvm_args = [command_line(pid) for pid in spark_jvms(engine.app)]
        assert run.jvm_args, "no Spark JVM found for the running ETL"
        proc.kill()  # SIGKILL, by pid
        run.killed_at_rows.append(len(rows_or_empty(root, "votes")))
        assert gone(engine.app, 60), "Spark outlived its SIGKILLed driver"

        proc, args = etl_process(engine, run, 2)
        started.append(proc)
        run.running = proc
        # Scraped before Spark (which takes many seconds to start) lands anything.
        wait_until_serving(settings, run.prometheus, {"etl": 1})
        poll("the warehouse to catch up", lambda: done(root, engine), deadline, proc.alive)
        port = args[args.index("--metrics-port") + 1]

        def scraped() -> bool:
            # Counted just after the micro-batch's last Delta commit, so poll for it.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                run.metrics = r.read().decode()
            # Spark reports a micro-batch's progress just after our writes: the changelog's too
            # (its series is exported at 0 from the start: `progress.expect`)
            changelog = 'txstream_etl_micro_batch_seconds_count{query="changelog",stage="addBatch"}'
            reported = changelog in run.metrics and metric(run.metrics, changelog) >= 1
            return 'reason="undecodable",table="votes"' in run.metrics and reported

        poll("the metrics of the last micro-batch", scraped, deadline, proc.alive)
        yield run
    finally:
        for proc in started:
            proc.kill()
        gone(engine.app, 60)
        run.prometheus.process.stop()


def test_killed_mid_stream_then_caught_up(etl: EtlRun, engine: EngineRun) -> None:
    assert etl.killed_at_rows, "the ETL was never killed"
    assert all(n < engine.accepted for n in etl.killed_at_rows), (
        f"killed at {etl.killed_at_rows} votes landed: not mid-stream (of {engine.accepted})"
    )
    root = etl.warehouse / engine.app
    commits = [(c["query"], c["etl_batch"]) for c in rows(root, "etl_commits")]
    assert len(commits) == len(set(commits)), "a micro-batch was recorded twice"


def test_the_spark_jvm_runs_with_the_settings_jvm_options(etl: EtlRun) -> None:
    """The first JIT tier with a full code cache, passed by the session's own conf (no
    SPARK_SUBMIT_OPTS here): without it a streaming driver's compilations take two cores."""
    options = Settings().spark_jvm_options.split()
    assert options
    for args in etl.jvm_args:
        assert all(o in args for o in options), args


def test_votes_were_appended_by_spark_and_by_the_driver(etl: EtlRun, engine: EngineRun) -> None:
    """The run with --driver-rows 0 appended by Spark, the default run by delta-rs, to one
    table: the next test finds every vote in it once."""
    history = DeltaTable(str(etl.warehouse / engine.app / "votes")).history()
    marked = [c["engineInfo"] for c in history if c.get("userMetadata")]
    engines = {info.split("/")[0].split(":")[0] for info in marked}
    assert engines == {"Apache-Spark", "delta-rs"}


def test_votes_fact_holds_every_accepted_vote_once(etl: EtlRun, engine: EngineRun) -> None:
    root = etl.warehouse / engine.app
    votes = rows(root, "votes")
    ids = [v["vote_id"] for v in votes]
    assert len(ids) == len(set(ids)), "duplicate votes in the fact table"
    assert len(ids) == engine.accepted
    removed = {r["contestant_number"] for r in rows(root, "removals")}
    current = {
        v["vote_id"]: (v["phone_number"], v["contestant_number"], v["state"])
        for v in votes
        if v["contestant_number"] not in removed
    }
    assert current == {
        k[0]: (r["phone_number"], r["contestant_number"], r["state"])
        for k, r in engine.tables["votes"].items()
    }
    assert all(v["committed_date"] == v["committed_at"].date() for v in votes)


def test_mirrors_equal_the_engine_tables(etl: EtlRun, engine: EngineRun) -> None:
    root = etl.warehouse / engine.app
    contestants = rows(root, "contestants")
    assert {
        c["contestant_number"]: (c["contestant_name"], c["num_votes"])
        for c in contestants
        if c["is_current"]
    } == {
        k[0]: (r["contestant_name"], r["num_votes"])
        for k, r in engine.tables["contestants"].items()
    }
    removed = {
        (r["seq"], r["contestant_number"], r["num_votes"], r["at_accepted"])
        for r in rows(root, "removals")
    }
    assert removed == {
        (k[0], r["contestant_number"], r["num_votes"], r["at_accepted"])
        for k, r in engine.tables["removed"].items()
    }
    assert removed, "no contestant was removed: the run is too short to test removals"
    # A contestant added and removed within one group commit is only a tombstone in the
    # changelog, so it is in `removals` but never reached the dimension.
    assert {c["contestant_number"] for c in contestants if not c["is_current"]} <= {
        r[1] for r in removed
    }
    assert {
        (s["counter"],) if s["detail"] is None else (s["counter"], s["detail"]): s["value"]
        for s in rows(root, "stats")
    } == {k: r["value"] for k, r in engine.tables["stats"].items()}
    assert {t["contestant_number"]: t["value"] for t in rows(root, "trending")} == {
        k[0]: r["value"] for k, r in engine.tables["trending"].items()
    }


def test_latest_snapshot_is_the_engines_result(etl: EtlRun, engine: EngineRun) -> None:
    snapshots = rows(etl.warehouse / engine.app, "leaderboard_snapshots")
    latest = max(snapshots, key=lambda s: s["etl_batch"])
    doc = result_document(engine.tables)
    assert json.loads(latest["document"]) == doc
    assert [[b["contestant_number"], b["num_votes"]] for b in latest["top3"]] == doc["top3"]
    assert latest["accepted"] == doc["accepted"]
    assert len({s["etl_batch"] for s in snapshots}) == len(snapshots)


def test_each_changelog_micro_batch_reads_as_its_snapshot_saw_it(
    etl: EtlRun, engine: EngineRun
) -> None:
    """The mirrors read through `epochs.tables_at`, as of each micro-batch of the changelog,
    are what the snapshot taken right after it read: the recorded versions are right."""
    root = etl.warehouse / engine.app
    snapshots = {s["etl_batch"]: json.loads(s["document"])
                 for s in rows(root, "leaderboard_snapshots")}  # fmt: skip
    batches = [c["etl_batch"] for c in rows(root, "etl_commits")
               if c["query"] == "changelog" and c["etl_batch"] in snapshots]  # fmt: skip
    assert batches
    for batch in batches:
        at, tables = tables_at(root, "changelog", batch)
        assert set(at.versions) == {"contestants", "removals", "stats", "trending",
                                    "leaderboard_snapshots"}  # fmt: skip
        current = sorted(
            (r["contestant_number"], r["num_votes"])
            for r in tables["contestants"].to_pyarrow_table().to_pylist()
            if r["is_current"]
        )
        seen = [(c["contestant_number"], c["num_votes"]) for c in snapshots[batch]["contestants"]]
        assert current == seen, batch
        removed = tables["removals"].to_pyarrow_table().num_rows
        assert removed == len(snapshots[batch]["removed"]), batch
    # The same from the command line: the newest micro-batch, and its SQL.
    env = {**os.environ, "TXSTREAM_WAREHOUSE_URI": str(etl.warehouse)}
    txstream = str(Path(sys.executable).with_name("txstream"))
    told = subprocess.run([txstream, "etl", "epoch", "--app", engine.app], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert told.returncode == 0, told.stderr
    at, _ = tables_at(root, "changelog")
    assert f"changelog micro-batch {at.etl_batch}:" in told.stderr
    version = at.versions["contestants"]
    assert f"{root}/contestants` VERSION AS OF {version};" in told.stdout


def test_dirty_input_normalized_and_bad_rows_quarantined(etl: EtlRun, engine: EngineRun) -> None:
    root = etl.warehouse / engine.app
    ingested = {
        r["vote_id"]: {
            **{k: r[k] for k in ("vote_id", "phone_number", "contestant_number", "source_format")},
            "cast_at": r["cast_at"].replace(tzinfo=None).isoformat(),
        }
        for r in rows(root, "ingested_votes")
    }
    expected_rows = [e for _, e in DIRTY if isinstance(e, dict)]
    assert ingested == {e["vote_id"]: e for e in expected_rows}

    quarantine = rows(root, "quarantine")
    dirty = sorted(
        (q["payload"], q["reason"]) for q in quarantine if q["target_table"] == "ingested_votes"
    )
    assert sorted(r for _, r in dirty) == sorted(e for _, e in DIRTY if isinstance(e, str))
    assert ("5,6175550104,3", "unparseable") in dirty, "the raw payload is kept for inspection"
    bad_votes = {q["reason"]: q for q in quarantine if q["target_table"] == "votes"}
    assert bad_votes.keys() == {"bad_state", "undecodable"}
    assert json.loads(bad_votes["bad_state"]["payload"]) == BAD_STATE
    assert "not a batch envelope" in bad_votes["undecodable"]["detail"]
    assert len(quarantine) == len(dirty) + 2, "a bad row was quarantined twice"


def metric(text: str, sample: str) -> float:
    values = [
        float(line.split()[-1]) for line in text.splitlines() if line.startswith(sample + " ")
    ]
    assert values, f"{sample} is not exported"
    return values[0]


def test_metrics_count_rows_quarantine_and_freshness(etl: EtlRun) -> None:
    """The restarted run landed the rest of the votes and the two bad records at the end."""
    text = etl.metrics
    assert metric(text, 'txstream_etl_rows_total{table="votes"}') > 0
    for reason in ("bad_state", "undecodable"):
        assert (
            metric(text, f'txstream_etl_quarantined_total{{reason="{reason}",table="votes"}}') == 1
        )
    assert metric(text, 'txstream_etl_freshness_seconds_count{table="votes"}') == metric(
        text, 'txstream_etl_rows_total{table="votes"}'
    )
    # Spark's account of each micro-batch: every one that ran our writes, and idle ones too
    for query in ("streams", "changelog"):
        stage = f'txstream_etl_micro_batch_seconds_count{{query="{query}",stage='
        assert (
            1 <= metric(text, stage + '"addBatch"}') <= metric(text, stage + '"triggerExecution"}')
        )


def test_the_etl_dashboard_panels_show_data(etl: EtlRun) -> None:
    """Every panel expression over the ETL's metrics returns data from a real Prometheus
    (tests/integration/test_dashboards.py checks all the others)."""
    exprs = panel_exprs(lambda expr: "txstream_etl_" in expr)
    assert len(exprs) >= 6, exprs
    missing = panels_without_data(etl.prometheus, etl.settings, exprs, etl.began)
    assert not missing, "panels without data:\n" + "\n".join(missing)


@pytest.mark.slow  # a Spark run over every table (~60 s): runs in make faults
def test_maintain_compacts_and_vacuums_every_table_and_keeps_its_rows(
    etl: EtlRun, engine: EngineRun
) -> None:
    """`etl maintain` on the caught-up warehouse: every Delta table of the app, the system
    tables included, compacted and vacuumed, no row changed; the aggregate rebuilt."""
    assert etl.running is not None
    etl.running.kill()  # SIGKILL, by pid: no micro-batch commits beside the check below
    assert gone(engine.app, 60), "Spark outlived its SIGKILLed driver"
    root = etl.warehouse / engine.app
    tables = sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir())
    before = {t: sorted(map(repr, rows(root, t))) for t in tables}
    days = {v["committed_date"] for v in rows(root, "votes")}
    assert len(DeltaTable(str(root / "votes")).file_uris()) > len(days), "nothing to compact"
    log = etl.warehouse.parent / "maintain.log"
    args = ["etl", "maintain", "--app", engine.app, "--config", str(WAREHOUSE_CONFIG)]
    maintain = ServiceProcess(etl.settings, args, log, spark_env(etl))
    assert maintain.wait_exit(300) == 0, log.read_text()[-3000:]

    said = log.read_text()
    vacuumed = {line.split(":")[0] for line in said.splitlines() if line.endswith("; vacuumed")}
    assert vacuumed >= set(tables), f"not compacted and vacuumed: {set(tables) - vacuumed}"
    for table in tables:
        assert sorted(map(repr, rows(root, table))) == before[table], f"{table} changed"
    votes = rows(root, "votes")
    assert len(DeltaTable(str(root / "votes")).file_uris()) == len(days), "votes not compacted"
    expected = Counter((v["committed_date"], v["state"], v["contestant_number"]) for v in votes)
    daily = {(d["committed_date"], d["state"], d["contestant_number"]): d["votes"]
             for d in rows(root, "daily_votes")}  # fmt: skip
    assert daily == dict(expected)
