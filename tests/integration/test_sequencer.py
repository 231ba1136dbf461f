"""The sequencer against the real broker: raw events from kcat and confluent-kafka producers
become sealed atomic batches on the border topic; what cannot be admitted is dead-lettered.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka_env import KafkaEnv
from tests.support.sequencer_driver import (
    SequencerProcess,
    batches_by_partition,
    produce_events,
    read_batches,
    read_dead_letters,
    unique,
    wait_until,
    write_config,
)
from txstream.config import Settings
from txstream.engine.hops import PROGRESS
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.schemas.records import encode_record
from txstream.schemas.registry import SchemaRegistry

SCHEMA = "leaderboard.Vote"


def vote(vote_id: int, batch_id: int | None = None) -> dict[str, Any]:
    v: dict[str, Any] = {"vote_id": vote_id, "phone_number": 6175550000 + vote_id}
    v["contestant_number"] = vote_id % 7 + 1
    if batch_id is not None:
        v["batch_id"] = batch_id
    return v


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


@pytest.fixture
def sequencers() -> Iterator[list[SequencerProcess]]:
    started: list[SequencerProcess] = []
    yield started
    for s in started:
        s.kill()


@pytest.fixture
def start(
    settings: Settings, tmp_path: Path, sequencers: list[SequencerProcess]
) -> Callable[..., tuple[SequencerProcess, str]]:
    """Start a sequencer with one route from a new raw topic; returns it and its app name."""

    def run(raw: str, app: str | None = None, **route: Any) -> tuple[SequencerProcess, str]:
        app = app or unique("seqapp")
        name = unique("seq")
        spec = {"topic": raw, "app": app, "stream": "votes", "schema": SCHEMA, **route}
        config = write_config(tmp_path / f"{name}.toml", name, [spec])
        proc = SequencerProcess(settings, config, tmp_path / "sequencer.log")
        sequencers.append(proc)
        return proc, app

    return run


def dead_topic(proc: SequencerProcess) -> str:
    return f"txstream-sequencer-{proc.config.stem}.dead_letters"  # named after its file


def test_confluent_events_become_ordered_batches(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    raw = new_topic("raw")
    events = [vote(i, batch_id=i // 3 + 1) for i in range(30)]  # 10 batches of 3
    produce_events(settings, raw, events)
    proc, app = start(raw, batch_id_field="batch_id", seal_after_ms=100)

    def sealed() -> list[Any]:
        return read_batches(settings, app, "votes", SCHEMA)

    wait_until(lambda: len(sealed()) == 10, 60, proc.alive, "10 sealed batches")
    assert proc.terminate() == 0
    batches = sealed()
    assert [b.batch_id for b in batches] == list(range(1, 11))
    expected = [{k: v for k, v in e.items() if k != "batch_id"} for e in events]
    assert [t for b in batches for t in b.tuples] == expected


def test_kcat_events_with_a_batching_policy(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any], tmp_path: Path
) -> None:
    raw = new_topic("raw")
    lines = tmp_path / "events.jsonl"
    lines.write_text("".join(f'{{"vote_id": {i}, "phone_number": {i}, "contestant_number": 1}}\n'
                             for i in range(23)))  # fmt: skip
    subprocess.run(
        ["kcat", "-P", "-b", settings.bootstrap_servers, "-t", raw, "-l", str(lines)],
        check=True,
        timeout=60,
    )
    proc, app = start(raw, policy_events=5, policy_ms=300)

    def sealed() -> list[Any]:
        return read_batches(settings, app, "votes", SCHEMA)

    wait_until(lambda: sum(len(b.tuples) for b in sealed()) == 23, 60, proc.alive, "23 events")
    assert proc.terminate() == 0
    batches = sealed()
    assert [b.batch_id for b in batches] == list(range(1, len(batches) + 1))
    assert [len(b.tuples) for b in batches][:4] == [5, 5, 5, 5]
    assert [t["vote_id"] for b in batches for t in b.tuples] == list(range(23))


def test_batch_id_from_a_header(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    raw = new_topic("raw")
    for batch_id in (1, 2):
        produce_events(settings, raw, [vote(batch_id)], headers=[("bid", str(batch_id).encode())])
    produce_events(settings, raw, [vote(3)])  # no header: a dead letter, not a guess
    proc, app = start(raw, batch_id_header="bid", seal_after_ms=100)
    wait_until(
        lambda: len(read_batches(settings, app, "votes", SCHEMA)) == 2, 60, proc.alive, "2 batches"
    )
    dead = dead_topic(proc)
    wait_until(lambda: len(read_dead_letters(settings, dead)) == 1, 60, proc.alive, "a dead letter")
    assert proc.terminate() == 0
    (letter,) = read_dead_letters(settings, dead)
    assert letter["reason"] == "schema" and "header 'bid'" in letter["error"]


GOOD = [vote(1, 1), vote(2, 2), vote(3, 3)]


@pytest.mark.parametrize(
    ("reason", "bad", "route", "needle"),
    [
        ("late", [vote(9, 2)], {}, "is not above the last sealed batch"),
        ("out_of_order", [vote(5, 5), vote(4, 4)], {"seal_after_ms": 30000}, "after batch 5"),
        ("schema", [{"vote_id": "x", "batch_id": 4}], {}, "vote_id"),
        ("undecodable", [b"\xff\xfe not json"], {}, "not JSON"),
        ("oversized", [vote(i, 4) for i in range(3)], {"max_events": 2}, "exceeds 2 events"),
    ],
)
def test_each_dead_letter_reason_keeps_the_payload(
    settings: Settings,
    new_topic: Callable[..., str],
    start: Callable[..., Any],
    reason: str,
    bad: list[Any],
    route: dict[str, Any],
    needle: str,
) -> None:
    raw = new_topic("raw")
    produce_events(settings, raw, [*GOOD, *bad, vote(10, 10)])
    proc, app = start(raw, batch_id_field="batch_id", **{"seal_after_ms": 100, **route})
    dead = dead_topic(proc)
    rejected = [b for b in bad if reason != "out_of_order" or b["batch_id"] == 4]

    def letters() -> list[dict[str, Any]]:
        return read_dead_letters(settings, dead)

    wait_until(lambda: len(read_batches(settings, app, "votes", SCHEMA)) >= 3, 60, proc.alive,
               "the good batches")  # fmt: skip
    wait_until(lambda: len(letters()) == len(rejected), 60, proc.alive, f"{reason} letters")
    assert proc.terminate() == 0
    got = letters()
    assert {d["reason"] for d in got} == {reason}
    assert all(needle in d["error"] for d in got), got[0]["error"]
    payloads = [b if isinstance(b, bytes) else None for b in rejected]
    for letter, sent, raw_payload in zip(got, rejected, payloads, strict=True):
        assert letter["topic"] == raw and letter["offset"] >= 3
        if raw_payload is not None:
            assert letter["payload"] == raw_payload
        else:
            assert json.loads(letter["payload"]) == sent
    sealed_ids = [b.batch_id for b in read_batches(settings, app, "votes", SCHEMA)]
    assert sealed_ids[:3] == [1, 2, 3] and sealed_ids == sorted(set(sealed_ids))


def test_an_exact_resend_is_dropped_and_nothing_is_dead_lettered(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    raw = new_topic("raw")
    produce_events(settings, raw, [*GOOD, vote(2, 2), vote(4, 4)])
    proc, app = start(raw, batch_id_field="batch_id", seal_after_ms=100)
    wait_until(lambda: len(read_batches(settings, app, "votes", SCHEMA)) == 4, 60, proc.alive,
               "4 batches")  # fmt: skip
    assert proc.terminate() == 0
    assert [b.batch_id for b in read_batches(settings, app, "votes", SCHEMA)] == [1, 2, 3, 4]
    assert read_dead_letters(settings, dead_topic(proc)) == []


def test_the_gate_admits_a_batch_only_after_the_previous_one_committed(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    raw = new_topic("raw")
    produce_events(settings, raw, [vote(1, 1), vote(2, 2), vote(3, 3)])
    app = unique("seqapp")
    TopicAdmin(settings).create_topic(AppTopics(app).commits, 1)
    proc, _ = start(raw, app=app, batch_id_field="batch_id", seal_after_ms=50, gate=True)
    notices = SchemaRegistry(settings.schema_dir).get("txstream.CommitNotice")

    def committed(batch_id: int) -> None:  # what the app's engine writes after a group commit
        notice = {"app": app, "partition": 0, "batches": 1, "executions": 1, "aborts": 0,
                  "last_batch_ids": {"votes": batch_id}, "first_batch_ids": {"votes": batch_id},
                  "committed_at_ms": 0}  # fmt: skip
        produce_events(settings, AppTopics(app).commits, [encode_record(notices, notice)])

    def sealed() -> list[int]:
        return [b.batch_id for b in read_batches(settings, app, "votes", SCHEMA)]

    wait_until(lambda: sealed() == [1], 60, proc.alive, "batch 1, admitted at once")
    committed(1)
    wait_until(lambda: sealed() == [1, 2], 60, proc.alive, "batch 2, after batch 1 committed")
    # batch 3 has been ready since batch 2 was: it must still be held (a bounded check of
    # an absence, over many times the 50 ms seal and 100 ms commit intervals)
    with pytest.raises(AssertionError, match="timed out"):
        wait_until(lambda: len(sealed()) > 2, 2, proc.alive, "batch 3 held by the gate")
    committed(2)
    wait_until(lambda: sealed() == [1, 2, 3], 60, proc.alive, "batch 3, after batch 2 committed")
    assert proc.terminate() == 0


def test_a_keyed_event_lands_on_the_partition_that_oltp_routes_its_key_to(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    raw, app, lanes = new_topic("raw"), unique("seqapp"), 5
    TopicAdmin(settings).create_topic(AppTopics(app).stream("votes"), lanes)
    sent = [vote(i) for i in range(40)]
    produce_events(settings, raw, sent)
    proc, _ = start(raw, app=app, key_field="phone_number", policy_events=1)

    def placed() -> dict[int, list[int]]:
        by_partition = batches_by_partition(settings, app, "votes", SCHEMA)
        return {
            p: [t["phone_number"] for b in bs for t in b.tuples] for p, bs in by_partition.items()
        }

    wait_until(lambda: sum(map(len, placed().values())) == len(sent), 60, proc.alive, "every vote")
    assert proc.terminate() == 0
    got = placed()
    phones = [v["phone_number"] for v in sent]
    expected = {p: [n for n in phones if partition_of((n,), lanes) == p] for p in range(lanes)}
    assert got == expected
    assert sum(1 for phones in got.values() if phones) > 1, "the votes spread over the lanes"


def test_a_broadcast_route_seals_each_batch_onto_every_partition(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    """The input of a spanning procedure: every engine must see every batch, in order."""
    raw, app, lanes = new_topic("raw"), unique("seqapp"), 3
    TopicAdmin(settings).create_topic(AppTopics(app).stream("votes"), lanes)
    sent = [vote(i, batch_id=1 + i // 4) for i in range(20)]
    produce_events(settings, raw, sent)
    proc, _ = start(raw, app=app, batch_id_field="batch_id", broadcast=True)

    def placed() -> dict[int, list[tuple[int, list[int]]]]:
        by_partition = batches_by_partition(settings, app, "votes", SCHEMA)
        return {p: [(b.batch_id, [t["vote_id"] for t in b.tuples]) for b in bs]
                for p, bs in by_partition.items()}  # fmt: skip

    def complete() -> bool:
        return all(sum(len(ids) for _, ids in bs) == len(sent) for bs in placed().values())

    wait_until(complete, 60, proc.alive, "every vote on every partition")
    assert proc.terminate() == 0
    expected = [(b, [v["vote_id"] for v in sent if v["batch_id"] == b]) for b in range(1, 6)]
    assert placed() == dict.fromkeys(range(lanes), expected)


def test_a_spanning_route_places_each_batch_where_its_keys_live(
    settings: Settings, new_topic: Callable[..., str], tmp_path: Path,
    sequencers: list[SequencerProcess],
) -> None:  # fmt: skip
    """The input of a spanning procedure (`bank.stream_transfers`), placed by the keys each
    batch declares: each partition gets the batches with a payer or payee it owns (worked
    out here), and the partitions that did not get a commit's last batch a mark of it."""
    raw, app, partitions = new_topic("raw"), unique("seqspan"), 3
    TopicAdmin(settings).create_topic(AppTopics(app).stream("transfers"), partitions)
    moves = [(0, 1), (2, 2), (4, 5), (1, 3), (6, 7), (3, 0)]
    sent = [{"seq": i, "payer": x, "payee": y, "amount": 1, "batch_id": i + 1}
            for i, (x, y) in enumerate(moves)]  # fmt: skip
    produce_events(settings, raw, sent)
    route = {"topic": raw, "app": app, "stream": "transfers", "schema": "bank.Transfer",
             "batch_id_field": "batch_id", "seal_after_ms": 100, "spanning": True}  # fmt: skip
    config = write_config(tmp_path / "span.toml", unique("seq"), [route])
    proc = SequencerProcess(settings, config, tmp_path / "sequencer.log", "--app",
                            "bank.stream_transfers:from_params", "--params",
                            json.dumps({"name": app}))  # fmt: skip
    sequencers.append(proc)

    def logs() -> dict[int, list[tuple[str, int]]]:
        by_partition = batches_by_partition(settings, app, "transfers", "bank.Transfer")
        return {p: [(b.stream, b.batch_id) for b in bs] for p, bs in by_partition.items()}

    def every_partition_at_6() -> bool:
        return len(logs()) == partitions and all(log and log[-1][1] == 6 for log in logs().values())

    wait_until(every_partition_at_6, 60, proc.alive, "batch 6 or a mark of it everywhere")
    assert proc.terminate() == 0
    for p, log in logs().items():
        owners = [{partition_of((x,), partitions), partition_of((y,), partitions)}
                  for x, y in moves]  # fmt: skip
        want = [i + 1 for i, touched in enumerate(owners) if p in touched]
        assert [b for kind, b in log if kind != PROGRESS] == want, f"partition {p}"
        assert all(b not in want for kind, b in log if kind == PROGRESS), f"partition {p}"
    bad = write_config(tmp_path / "bad.toml", unique("seq"), [route])
    refused = SequencerProcess(settings, bad, tmp_path / "refused.log")  # no --app
    sequencers.append(refused)
    assert refused.wait_exit(60) == 2
    assert "the sequencer needs app" in (tmp_path / "refused.log").read_text()


def test_a_progress_route_marks_every_partition_after_the_batches_it_covers(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    """What an ordered repartitioned edge downstream needs: once every batch up to m has
    been sealed onto every partition, each partition is told so, after those batches."""
    raw, app, lanes = new_topic("raw"), unique("seqapp"), 3
    TopicAdmin(settings).create_topic(AppTopics(app).stream("votes"), lanes)
    sent = [vote(i, batch_id=1 + i // 4) for i in range(40)]  # batches 1..10, keyed by phone
    produce_events(settings, raw, sent)
    proc, _ = start(raw, app=app, batch_id_field="batch_id", key_field="phone_number",
                    seal_after_ms=100, progress=True)  # fmt: skip

    def logs() -> dict[int, list[tuple[str, int]]]:
        by_partition = batches_by_partition(settings, app, "votes", SCHEMA)
        return {p: [(b.stream, b.batch_id) for b in bs] for p, bs in by_partition.items()}

    def marked_to_the_end() -> bool:
        return all(log and log[-1] == (PROGRESS, 10) for log in logs().values())

    wait_until(marked_to_the_end, 60, proc.alive, "a mark at batch 10 on every partition")
    assert proc.terminate() == 0
    placed = {p: {b["batch_id"] for b in sent if partition_of((b["phone_number"],), lanes) == p}
              for p in range(lanes)}  # fmt: skip
    for p, log in logs().items():
        data = [b for kind, b in log if kind != PROGRESS]
        assert data == sorted(placed[p]), f"partition {p}"
        marks = [(i, b) for i, (kind, b) in enumerate(log) if kind == PROGRESS]
        assert [b for _, b in marks] == sorted({b for _, b in marks})  # rising
        for i, m in marks:  # nothing at or below a mark comes after it
            assert all(b > m for kind, b in log[i + 1 :] if kind != PROGRESS), f"p{p} {log}"
            assert {b for kind, b in log[:i] if kind != PROGRESS} >= {
                b for b in placed[p] if b <= m
            }


def test_a_progress_route_refuses_an_input_it_cannot_read_in_order(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any], tmp_path: Path
) -> None:
    raw = new_topic("raw", partitions=2)
    proc, _ = start(raw, batch_id_field="batch_id", key_field="phone_number", progress=True)
    assert proc.wait_exit(60) == 2
    log = (tmp_path / "sequencer.log").read_text()
    assert f"route {raw!r}: progress marks need its batch ids read in the order" in log
    assert "so one input partition, not 2" in log


def test_poison_pills_are_dead_lettered_and_the_next_event_is_sealed(
    settings: Settings, new_topic: Callable[..., str], start: Callable[..., Any]
) -> None:
    """Each of these once killed the sequencer, which re-read it forever under supervision."""
    raw = new_topic("raw")
    fields = b'"vote_id": 1, "phone_number": 1, "contestant_number": 1'
    deep = b"{" + fields + b', "batch_id": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    infinite = b"{" + fields + b', "batch_id": Infinity}'
    too_big = b"{" + fields + b', "batch_id": 9223372036854775808}'
    pills = [deep, infinite, too_big]
    produce_events(settings, raw, [*pills, vote(7, 1)])
    proc, app = start(raw, batch_id_field="batch_id", seal_after_ms=100)
    dead = dead_topic(proc)

    def sealed() -> list[Any]:
        return read_batches(settings, app, "votes", SCHEMA)

    wait_until(lambda: len(read_dead_letters(settings, dead)) == 3, 60, proc.alive, "3 letters")
    wait_until(lambda: len(sealed()) == 1, 60, proc.alive, "the good event's batch")
    assert proc.terminate() == 0
    letters = read_dead_letters(settings, dead)
    assert [(d["offset"], d["payload"]) for d in letters] == list(enumerate(pills))
    assert [d["reason"] for d in letters] == ["undecodable", "schema", "schema"]
    assert "nested deeper than" in letters[0]["error"]
    assert "batch id Infinity is not an integer" in letters[1]["error"]
    assert "batch id 9223372036854775808 out of range [1, 2^63)" in letters[2]["error"]
    ((batch_id, tuples),) = [(b.batch_id, b.tuples) for b in sealed()]
    assert batch_id == 1 and tuples == [vote(7)]
