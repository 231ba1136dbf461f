"""The worker's own work per Leaderboard batch, without Kafka: decode, the engine, commit.

    .venv/bin/python -m bench.engine_bench --votes 20000 --groups 1,20,5000

End-to-end runs on a shared two-core VM swing by half from run to run, far more than most
changes to the batch path move them. This times the task thread's path alone, as the worker
runs it: each vote batch decoded from its Avro envelope, run by the partition engine over the
committed state in RocksDB (with the record limit checking each TE), and every G batches the
group's state writes encoded, as the commit thread does, and applied to RocksDB, as the task
thread does once Kafka has committed them. Nothing is produced. Small groups are the live
case (a worker that keeps up commits every 10 ms), large ones the backed-up case.

Prints microseconds per batch (the median of --repeat runs, each on a fresh store) as a
markdown table for docs/performance-history.md: the task thread's CPU time, which other load on the
machine stretches less than the wall clock (also shown).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import date
from pathlib import Path

import typer

from bench.machine_info import machine, machine_text
from leaderboard.dataflow import Params, build_app
from leaderboard.reference_data import reference_batches
from leaderboard.votegen import write_votes_file
from leaderboard.votes_file import iter_batches
from txstream.commit.record_limit import RecordLimit
from txstream.config import Settings
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.observability import metrics
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.state.committed import CommittedState
from txstream.state.store import StateStore


def encoded_batches(app: App, registry: SchemaRegistry, votes: Path) -> list[tuple[int, bytes]]:
    codec = BatchCodec(registry.get(app.decl.streams["votes"].schema))
    return [
        (b.batch_id, codec.encode("votes", b.batch_id, [asdict(v) for v in b.votes]))
        for b in iter_batches(votes, 1)
    ]


@contextmanager
def leaderboard_engine(
    app: App, registry: SchemaRegistry, db: Path
) -> Iterator[tuple[Callable[[int, bytes], None], Callable[[], None]]]:
    """The partition engine over a fresh store at `db`, the reference data committed, as
    two calls: run one vote batch (decoded from its Avro envelope, as the task thread
    does), and commit the group without Kafka (the writes encoded, as the commit thread
    does, and applied to RocksDB, as the task thread does once Kafka has committed them)."""
    settings = Settings()
    codec = StateCodec(app.dataflow(), registry)
    batch_codecs = {
        name: BatchCodec(registry.get(stream.schema)) for name, stream in app.decl.streams.items()
    }
    record_check = RecordLimit(
        settings.kafka_max_record_bytes, AppTopics(app.name), batch_codecs, codec
    )
    with StateStore.open(db) as store:
        state = CommittedState(store, codec)
        engine = PartitionEngine(app.dataflow(), state, 0, app.params,
                                 timer=metrics.te_timer(app.name), record_check=record_check,
                                 flat_tables=codec.flat_tables)  # fmt: skip
        for stream, tuples in reference_batches(int(app.params["contestants"])).items():
            engine.process(stream, 1, tuples)
        offset = 0

        def commit() -> None:
            nonlocal offset
            offset += 1
            state.apply(codec.encode_writes(engine.take_group().ws), offset)

        votes = batch_codecs["votes"]

        def run(batch_id: int, record: bytes) -> None:
            engine.process("votes", batch_id, votes.decode(record).tuples)

        commit()
        yield run, commit


def run_once(
    app: App, registry: SchemaRegistry, batches: list[tuple[int, bytes]], group: int, db: Path
) -> tuple[float, float]:
    """Seconds for the whole run of `batches`, committing every `group` batches: the task
    thread's CPU time, which the machine's other load does not stretch as it does the wall
    clock, and the wall clock."""
    with leaderboard_engine(app, registry, db) as (run, commit):
        started, cpu = time.perf_counter(), time.thread_time()
        for n, (batch_id, record) in enumerate(batches, 1):
            run(batch_id, record)
            if n % group == 0:
                commit()
        commit()
        return time.thread_time() - cpu, time.perf_counter() - started


def main(
    votes: int = typer.Option(20_000, help="votes, one per batch"),
    groups: str = typer.Option("1,20,5000", help="batches per group commit, comma-separated"),
    repeat: int = typer.Option(3, help="runs per group size; the median is reported"),
    threshold: int = typer.Option(5_000),
    seed: int = typer.Option(1),
) -> None:
    params = Params(contestants=50, threshold=threshold, max_votes=1, window=100, slide=10)
    app = build_app(params, name="engine-bench")
    registry = SchemaRegistry(Settings().schema_dir)
    sizes = [int(g) for g in groups.split(",")]
    out = [
        f"Date: {date.today()}. Machine: {machine_text(machine())}. Command: `.venv/bin/python -m "
        f"bench.engine_bench --votes {votes} --groups {groups} --repeat {repeat}`.",
        "",
        "| batches per group commit | CPU µs per batch (median) | CPU runs | wall µs (median) |",
        "|---:|---:|---|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as tmp:
        path = Path(tmp) / "votes.txt"
        write_votes_file(path, votes, contestants=params.contestants, seed=seed)
        batches = encoded_batches(app, registry, path)
        for size in sizes:
            runs = [
                run_once(app, registry, batches, size, Path(tmp) / f"db-{size}-{i}")
                for i in range(repeat)
            ]
            cpu = [c * 1e6 / votes for c, _ in runs]
            wall = [w * 1e6 / votes for _, w in runs]
            each = ", ".join(f"{c:.1f}" for c in cpu)
            typer.echo(f"group {size}: {each} CPU µs per batch", err=True)
            out.append(f"| {size:,} | {statistics.median(cpu):.1f} | "
                       f"{' / '.join(f'{c:.1f}' for c in cpu)} | "
                       f"{statistics.median(wall):.1f} |")  # fmt: skip
    typer.echo("\n".join(out))


if __name__ == "__main__":
    typer.run(main)
