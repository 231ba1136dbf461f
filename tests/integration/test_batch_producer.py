"""`BatchProducer` on the real broker: whole batches placed where the dataflow needs them,
ids that keep increasing across producers, and nothing visible of a batch or transaction
that failed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import pytest

from tests.support.kafka_env import KafkaEnv
from txstream import App, BatchError, BatchProducer, Record, TxnContext
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import LEADER_KEY, partition_of
from txstream.schemas import BatchCodec
from txstream.sequencer_config import Route, SequencerConfig

pytestmark = pytest.mark.kafka


class Click(TypedDict):
    user: str
    page: str


def clicks_app() -> App:
    app = App(f"bp-{uuid.uuid4().hex[:8]}")
    clicks = app.stream("clicks", schema=Click, key_field="user")
    seen = app.stream("seen", schema=Click)

    @app.procedure(input=clicks, outputs=[seen])
    def copy(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for row in batch:
            ctx.emit(seen, row)

    return app


def committed(
    kafka: KafkaEnv, app: App, stream: str, partitions: int
) -> dict[int, list[tuple[int, list[Record]]]]:
    """Each partition's batches, as (batch id, tuples), read_committed."""
    codec = BatchCodec(app.schema_registry(kafka.settings.schema_dir).get(
        app.decl.streams[stream].schema))  # fmt: skip
    topic = f"{app.name}.{stream}"
    out: dict[int, list[tuple[int, list[Record]]]] = {}
    for p in range(partitions):
        values = [m.value() or b"" for m in read_to_committed_end(kafka.settings, topic, p)]
        batches = [codec.decode(v) for v in values]
        out[p] = [(b.batch_id, b.tuples) for b in batches]
    return out


def test_batches_go_whole_to_their_key_partition_with_ids_that_keep_increasing(
    kafka: KafkaEnv,
) -> None:
    settings = kafka.settings.model_copy(update={"kafka_partitions": 4})
    app = clicks_app()
    users = ["ann", "bob", "cy", "dee", "eve"]
    with BatchProducer(app, settings) as producer:
        ids = [producer.send("clicks", [{"user": u, "page": "/a"}, {"user": u, "page": "/b"}])
               for u in users]  # fmt: skip
    assert ids == [1, 2, 3, 4, 5]
    with BatchProducer(app, settings) as again:  # a new producer goes on after the topic's
        assert again.send(app.decl.streams["clicks"], [{"user": "ann", "page": "/c"}]) == 6
        with pytest.raises(BatchError, match="batch id 3 is not above 6"):
            again.send("clicks", [{"user": "ann", "page": "/d"}], batch_id=3)
        assert again.send("clicks", [{"user": "bob", "page": "/e"}], batch_id=10) == 10
    placed = committed(kafka, app, "clicks", 4)
    for user, batch_id in zip(users, ids, strict=True):
        home = partition_of((user,), 4)
        assert (batch_id, [{"user": user, "page": "/a"}, {"user": user, "page": "/b"}]) in \
            placed[home]  # fmt: skip
    assert sum(len(b) for b in placed.values()) == 7
    for batches in placed.values():
        assert [i for i, _ in batches] == sorted(i for i, _ in batches)


def test_a_bad_batch_or_a_failed_transaction_leaves_nothing(kafka: KafkaEnv) -> None:
    settings = kafka.settings.model_copy(update={"kafka_partitions": 2})
    app = clicks_app()
    with BatchProducer(app, settings) as producer:
        with pytest.raises(BatchError, match=r"stream 'clicks': row 1: .*page"):
            producer.send("clicks", [{"user": "ann", "page": "/a"}, {"user": "ann", "page": 7}])
        apart = next(u for u in ("bob", "cy", "dee", "eve", "fay")
                     if partition_of((u,), 2) != partition_of(("ann",), 2))  # fmt: skip
        with pytest.raises(BatchError, match=r"names partitions .* a batch goes to one"):
            producer.send("clicks", [{"user": "ann", "page": "/a"}, {"user": apart, "page": "/a"}])
        with pytest.raises(BatchError, match="output of procedure 'copy'"):
            producer.send("seen", [{"user": "ann", "page": "/a"}])
        with pytest.raises(BatchError, match="no stream 'click'"):
            producer.send("click", [])
        with pytest.raises(RuntimeError, match="changed my mind"), producer.transaction():
            producer.send("clicks", [{"user": "ann", "page": "/a"}])
            raise RuntimeError("changed my mind")
        assert producer.send("clicks", [{"user": "cy", "page": "/z"}]) == 1, "ids unused"
    placed = committed(kafka, app, "clicks", 2)
    assert sorted(b for batches in placed.values() for b in batches) == [
        (1, [{"user": "cy", "page": "/z"}])
    ]


def sequencer_config(app: App) -> SequencerConfig:
    """Three routes to the clicks stream's app: batch ids in a field, in a header, and
    sealed by the sequencer's own policy (each to a stream of its own)."""
    ids: list[tuple[str, dict[str, Any]]] = [
        ("clicks", {"batch_id_field": "batch"}),
        ("more_clicks", {"batch_id_header": "batch"}),
        ("policy_clicks", {"policy_events": 10}),
    ]
    routes = [
        Route.model_validate({"topic": f"{app.name}.raw-{stream}", "app": app.name,
                              "stream": stream, "schema": "x.Click", **how})
        for stream, how in ids
    ]  # fmt: skip
    return SequencerConfig.model_validate({"name": f"seq-{app.name}", "routes": routes})


def raw(kafka: KafkaEnv, topic: str) -> list[tuple[Any, dict[str, Any]]]:
    """Each committed record of `topic`: its JSON value and its headers."""
    records = read_to_committed_end(kafka.settings, topic, 0)
    return [(json.loads(m.value() or b""), dict(m.headers() or [])) for m in records]


def test_raw_events_go_to_the_sequencer_route_of_their_stream_checked_first(
    kafka: KafkaEnv,
) -> None:
    app = clicks_app()
    app.stream("more_clicks", schema=Click)
    app.stream("policy_clicks", schema=Click)
    config = sequencer_config(app)
    admin = TopicAdmin(kafka.settings)
    for route in config.routes:
        admin.create_topic(route.topic, 1)
    rows = [{"user": "ann", "page": "/a"}, {"user": "bob", "page": "/b"}]
    with BatchProducer(app, kafka.settings, sequencer=config) as producer:
        assert producer.send_events("clicks", rows, batch_id=4) == 2
        assert producer.send_events(app.decl.streams["more_clicks"], rows[:1], batch_id=9) == 1
        assert producer.send_events("policy_clicks", rows) == 2
        with pytest.raises(BatchError, match=r"stream 'clicks': event 1: .*page"):
            producer.send_events("clicks", [rows[0], {"user": "cy", "page": 7}], batch_id=5)
        with pytest.raises(BatchError, match="from 'batch': give batch_id"):
            producer.send_events("clicks", rows)
        with pytest.raises(BatchError, match=r"its own policy.*batch_id=3"):
            producer.send_events("policy_clicks", rows, batch_id=3)
        with pytest.raises(BatchError, match=r"'seen' is the output of procedure 'copy'"):
            producer.send_events("seen", rows)
    assert raw(kafka, f"{app.name}.raw-clicks") == [
        ({"user": "ann", "page": "/a", "batch": 4}, {}),
        ({"user": "bob", "page": "/b", "batch": 4}, {}),
    ], "a refused event takes the others of its call with it"
    header = raw(kafka, f"{app.name}.raw-more_clicks")
    assert header == [({"user": "ann", "page": "/a"}, {"batch": b"9"})]
    assert [v for v, _ in raw(kafka, f"{app.name}.raw-policy_clicks")] == rows


def test_raw_events_need_the_sequencers_configuration(kafka: KafkaEnv, tmp_path: Path) -> None:
    app = clicks_app()
    with (
        BatchProducer(app, kafka.settings) as producer,
        pytest.raises(BatchError, match=r"BatchProducer\(app, sequencer="),
    ):
        producer.send_events("clicks", [])
    toml = tmp_path / "sequencer.toml"
    toml.write_text('name = "s"\n[[routes]]\ntopic = "t"\napp = "other"\nstream = "clicks"\n'
                    'schema = "x.Click"\npolicy_ms = 100\n')  # fmt: skip
    expected = f"no route to stream 'clicks' of app '{app.name}'; it routes to none of its"
    with (
        BatchProducer(app, kafka.settings, sequencer=toml) as producer,
        pytest.raises(BatchError, match=expected),
    ):
        producer.send_events("clicks", [])


class Timed(TypedDict):
    at: datetime


def test_an_event_that_fits_avro_but_has_no_json_form_is_refused(kafka: KafkaEnv) -> None:
    """A datetime fits a timestamp field, but a JSON event cannot carry one."""
    app = App(f"bp-{uuid.uuid4().hex[:8]}")
    app.stream("ticks", schema=Timed)
    route = Route.model_validate({"topic": f"{app.name}.raw", "app": app.name,
                                  "stream": "ticks", "schema": "x", "policy_ms": 100})  # fmt: skip
    config = SequencerConfig.model_validate({"name": "s", "routes": [route]})
    TopicAdmin(kafka.settings).create_topic(route.topic, 1)
    with (
        BatchProducer(app, kafka.settings, sequencer=config) as producer,
        pytest.raises(BatchError, match="stream 'ticks': event 0: no JSON form"),
    ):
        producer.send_events("ticks", [{"at": datetime(2026, 12, 7, tzinfo=UTC)}])
    assert raw(kafka, route.topic) == []


class Transfer(TypedDict):
    seq: int
    payer: int
    payee: int
    amount: int


class Balance(TypedDict):
    account: int
    balance: int


def transfers_app() -> App:
    """A spanning procedure over accounts: each transfer touches its payer and payee."""
    app = App(f"bp-span-{uuid.uuid4().hex[:8]}")
    transfers = app.stream("transfers", schema=Transfer)
    accounts = app.table("accounts", schema=Balance, key=("account",))

    def touches(t: Record) -> list[tuple[str, int]]:
        if t["payer"] < 0:
            raise ValueError(f"no account {t['payer']}")
        return [("accounts", t["payer"]), ("accounts", t["payee"])]

    @app.procedure(input=transfers, touches=touches)
    def move(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for t in batch:
            rows.put(t["payee"], {"account": t["payee"], "balance": t["amount"]})

    return app


def test_a_spanning_batch_goes_only_to_the_partitions_it_touches(kafka: KafkaEnv) -> None:
    """Each partition holds exactly the batches with a payer or payee it owns (worked out
    here from the keys), a progress mark where a transaction's last batch did not go, and
    the bytes written are the touched partitions' share, not P copies of each batch."""
    partitions = 4
    settings = kafka.settings.model_copy(update={"kafka_partitions": partitions})
    app = transfers_app()
    moves = [[{"seq": i, "payer": i % 7, "payee": (3 * i + 1) % 11, "amount": 5}]
             for i in range(30)]  # fmt: skip
    with BatchProducer(app, settings) as producer:
        with producer.transaction():
            ids = [producer.send("transfers", rows) for rows in moves[:20]]
        ids += [producer.send("transfers", rows) for rows in moves[20:]]
        bad = {"seq": 99, "payer": -1, "payee": 1, "amount": 1}
        with pytest.raises(BatchError, match=r"'transfers': row 1: .* no account -1"):
            producer.send("transfers", [moves[0][0], bad])
    assert ids == list(range(1, 31))
    codec = BatchCodec(app.schema_registry(settings.schema_dir).get(
        app.decl.streams["transfers"].schema))  # fmt: skip
    written = broadcast = 0
    for p in range(partitions):
        messages = list(read_to_committed_end(settings, f"{app.name}.transfers", p))
        records = [(codec.decode(m.value() or b""), len(m.value() or b"")) for m in messages]
        for m, (batch, _) in zip(messages, records, strict=True):  # the leader's copy: keyed
            rows = moves[batch.batch_id - 1]
            lowest = min(partition_of((rows[0][k],), partitions) for k in ("payer", "payee"))
            leader = batch.stream == "transfers" and p == lowest
            assert m.key() == (LEADER_KEY if leader else None), f"partition {p}"
        got = [b.batch_id for b, _ in records if b.stream == "transfers"]
        want = [i for i, rows in zip(ids, moves, strict=True)
                if p in {partition_of((rows[0]["payer"],), partitions),
                         partition_of((rows[0]["payee"],), partitions)}]  # fmt: skip
        assert got == want, f"partition {p}"
        marks = [b.batch_id for b, _ in records if b.stream == "__progress__"]
        # the first transaction ends at 20, and each later one-batch transaction at its id
        owed = [i for i in [20, *ids[20:]] if i not in want]
        assert marks == owed, f"partition {p}"
        written += sum(n for b, n in records if b.stream == "transfers")
    broadcast = partitions * sum(len(codec.encode("transfers", i, rows))
                                 for i, rows in zip(ids, moves, strict=True))  # fmt: skip
    assert written <= broadcast * 2 / partitions  # two keys: at most two partitions each
