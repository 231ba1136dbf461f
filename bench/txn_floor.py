"""What a Kafka transaction costs on this broker: the floor under every group commit.

    .venv/bin/python -m bench.txn_floor --rounds 300

Each group commit is one Kafka transaction, and a batch is visible only once its commit is,
so the transaction's own round trips bound how short a commit, hence a batch's latency, can
be. This sends the same few records (`--records` to each of `--topics` single-partition
topics) from two producers, round by round in turn so the machine's drifts fall on both:
- plain: an idempotent producer, then `flush` (one produce round trip);
- transaction: `begin_transaction`, the same sends, `flush`, `commit_transaction`. Its
  flush waits first for the partitions to be added to the transaction (AddPartitionsToTxn,
  which the broker also verifies), then for the acknowledgements; its commit for EndTxn.
A flush over SLOW_MS is counted apart: librdkafka retries AddPartitionsToTxn after 20 ms
when the broker is still writing the previous transaction's markers, and a stall of the
broker or of this process shows up there too. The first WARMUP rounds are left out.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date

import typer
from confluent_kafka import Producer

from bench.machine_info import machine, machine_text, percentile
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, transactional_producer_config

SLOW_MS = 15.0
WARMUP = 20
PAYLOAD = b"x" * 100  # about a changelog record's size


@dataclass(frozen=True)
class Summary:
    """Milliseconds: percentiles as the other benchmarks take them (`machine_info`)."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float
    slow: int  # over SLOW_MS

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Summary:
        if not seconds:
            raise ValueError("no timings to summarize: every round was a warm-up round")
        ms = [s * 1000 for s in seconds]
        p50, p90, p99 = (percentile(ms, q) for q in (50, 90, 99))
        return cls(len(ms), p50, p90, p99, max(ms), sum(m > SLOW_MS for m in ms))


@contextmanager
def _topics(settings: Settings, count: int) -> Iterator[list[str]]:
    admin = TopicAdmin(settings)
    names = [f"txn-floor-{uuid.uuid4().hex[:8]}-{i}" for i in range(count)]
    try:
        for name in names:
            admin.create_topic(name, 1)
        yield names
    finally:
        admin.delete_topics(names)


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(settings: Settings, rounds: int, topics: int, records: int) -> dict[str, Summary]:
    """On `topics` topics of its own, removed afterwards: see `measure_on`."""
    with _topics(settings, topics) as names:
        return measure_on(settings, names, rounds, records)


def measure_on(
    settings: Settings, names: Sequence[str], rounds: int, records: int
) -> dict[str, Summary]:
    """{"plain flush" | "transaction flush" | "transaction commit": its Summary}, each
    round writing `records` to partition 0 of each of `names` from both producers."""
    plain = Producer({**idempotent_producer_config(settings), "linger.ms": 0})
    tx = Producer(
        {**transactional_producer_config(settings, f"txn-floor-{uuid.uuid4().hex}"), "linger.ms": 0}
    )
    tx.init_transactions(30)

    def send(producer: Producer) -> None:
        for name in names:
            for _ in range(records):
                producer.produce(name, PAYLOAD, partition=0)

    times: dict[str, list[float]] = {
        "plain flush": [], "transaction flush": [], "transaction commit": []
    }  # fmt: skip
    for i in range(WARMUP + rounds):
        send(plain)
        flushed = _timed(plain.flush)
        tx.begin_transaction()
        send(tx)
        tx_flushed = _timed(tx.flush)
        committed = _timed(tx.commit_transaction)
        if i >= WARMUP:
            times["plain flush"].append(flushed)
            times["transaction flush"].append(tx_flushed)
            times["transaction commit"].append(committed)
    return {what: Summary.of(seconds) for what, seconds in times.items()}


def table(results: dict[str, Summary], header: str) -> str:
    out = [
        header,
        "",
        f"| step | rounds | p50 | p90 | p99 | max | over {SLOW_MS:.0f} ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for what, s in results.items():
        out.append(
            f"| {what} | {s.n} | {s.p50:.2f} ms | {s.p90:.2f} ms | {s.p99:.2f} ms "
            f"| {s.max:.1f} ms | {s.slow} |"
        )
    return "\n".join(out)


def main(
    rounds: int = typer.Option(300, min=1, help="timed rounds of each producer"),
    topics: int = typer.Option(3, min=1, help="single-partition topics each round writes"),
    records: int = typer.Option(5, min=1, help="records to each topic a round"),
) -> None:
    settings = Settings()
    header = (
        f"Date: {date.today()}. Machine: {machine_text(machine(settings))}. Command: "
        f"`.venv/bin/python -m bench.txn_floor --rounds {rounds} --topics {topics} "
        f"--records {records}`."
    )
    typer.echo(table(measure(settings, rounds, topics, records), header))


if __name__ == "__main__":
    typer.run(main)
