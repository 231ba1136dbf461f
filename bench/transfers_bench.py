"""TSpoon's bank transfers as a dataflow, per isolation level: transfers/s against batch size
and workers.

    .venv/bin/python bench/transfers_bench.py --accounts 10000 --transfers 20000
    .venv/bin/python bench/transfers_bench.py --accounts 100 --isolation PL4,PL2 [--formulas]

Accounts open with 100 each; each transfer moves 1..100 between two uniformly random
accounts (TSpoon's workload), so with P partitions most transfers span two engines. The
transfers stream is read by a spanning procedure (`bank.stream_transfers`): each batch runs
as one transaction across the engines owning its accounts, serializable in input order at
PL4 (and PL3, which runs alike); at PL2-PL0 each batch reads the balances as of its epoch's
start (`--epoch` batches), so batches on the same accounts stop waiting for each other, and
a lost update can create or destroy money (`--formulas` moves it with `table.add`, which
applies to the balance as it stands at commit: none is). For each level, batch size K and
worker count W a fresh app runs on P partitions; the run is timed from the first transfer
sent to the last batch committed on every partition. Every run's outcomes and balances must
equal its level's reference (`bank.transfer_reference`), and at PL3/PL4 (or with formulas)
the total must be unchanged; a mismatch fails the benchmark. TSpoon's PL3 figure is the
published anchor. JSON: --out.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from machine_info import Column, markdown, write_report

from bank.stream_transfers import build_app
from bank.transfer_reference import reference
from orders.commits import CommitWatch
from txstream import BatchProducer, Isolation
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.model.app import App
from txstream.model.declarations import Record
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.stack.stack import Stack
from txstream.stack.supervisor import Policy, Supervised
from txstream.state.codec import StateCodec

OPENING = 100
TSPOON_PL3_PER_CORE = 172


def workload(accounts: int, transfers: int, seed: int) -> list[Record]:
    rng = random.Random(seed)
    return [
        {
            "seq": i,
            "payer": rng.randrange(accounts),
            "payee": rng.randrange(accounts),
            "amount": rng.randint(1, 100),
        }
        for i in range(transfers)
    ]


class TransfersRun:
    def __init__(
        self,
        settings: Settings,
        args: argparse.Namespace,
        k: int,
        w: int,
        isolation: Isolation = Isolation.PL4,
        epoch: int = 16,
        formulas: bool = False,
    ) -> None:
        self.settings, self.args, self.k, self.w = settings, args, k, w
        self.isolation, self.epoch, self.formulas = isolation, epoch, formulas
        name = f"transfers-{uuid.uuid4().hex[:10]}"
        self.app: App = build_app(name, isolation, epoch, formulas)
        self.topics = AppTopics(self.app.name)
        self.registry = self.app.schema_registry(settings.schema_dir)
        self.codecs = {
            s.name: BatchCodec(self.registry.get(s.schema)) for s in self.app.decl.streams.values()
        }

    def run(self, transfers: list[Record]) -> dict[str, Any]:
        services = self.start()
        try:
            started = time.monotonic()
            self.wait_transfers(self.send_transfers(transfers), services)
            elapsed = time.monotonic() - started
        finally:
            self.stop(services)
        return {"elapsed_s": elapsed, **self._read_back()}

    def start(self, *extra: Supervised) -> list[Supervised]:
        """Topics, the accounts opened, and the workers (and `extra` services) started and
        past the openings."""
        a, parts = self.args, self.args.partitions
        ensure_app_topics(TopicAdmin(self.settings), self.app, parts)
        self.producer = BatchProducer(self.app, self.settings)
        rows: list[list[Record]] = [[] for _ in range(parts)]
        for acct in range(a.accounts):
            rows[partition_of((acct,), parts)].append({"account": acct, "balance": OPENING})
        opened = [0] * parts
        with self.producer.transaction():  # each chunk goes to its accounts' partition
            for p, part_rows in enumerate(rows):
                for start in range(0, len(part_rows), 1000):
                    opened[p] = self.producer.send("opens", part_rows[start : start + 1000])
        services = [*self._workers(), *extra]
        self.watch = CommitWatch(self.settings, self.topics.commits, parts)
        try:
            for s in services:
                s.start()
            self.watch.wait({"opens": opened}, 600, lambda: self.alive(services))
        except BaseException:
            self.stop(services)
            raise
        return services

    def send_transfers(self, transfers: list[Record]) -> int:
        """Every transfer batch (to every partition: `transfer` spans them), committed 2,000
        batches a transaction; the number of batches."""
        batches = [transfers[i : i + self.k] for i in range(0, len(transfers), self.k)]
        for start in range(0, len(batches), 2000):
            with self.producer.transaction():
                for b, batch in enumerate(batches[start : start + 2000], start + 1):
                    self.producer.send("transfers", batch, batch_id=b)
        return len(batches)

    def wait_transfers(self, batches: int, services: list[Supervised]) -> None:
        self.watch.wait(self._all(batches), 1800, lambda: self.alive(services))

    def transfers_committed(self, batches: int) -> bool:
        """Whether every partition has committed the first `batches` (without waiting)."""
        return self.watch.reached(self._all(batches))

    def _all(self, batches: int) -> dict[str, list[int]]:
        return {"transfers": [batches] * self.args.partitions}

    @staticmethod
    def alive(services: list[Supervised]) -> bool:
        return all(s.supervisor.live_pid() is not None for s in services)

    def stop(self, services: list[Supervised]) -> None:
        self.watch.close()
        for s in services:
            s.stop()

    def _workers(self) -> list[Supervised]:
        txstream = str(Path(sys.executable).with_name("txstream"))
        params = json.dumps(
            {
                "name": self.app.name,
                "isolation": self.isolation.value,
                "epoch": self.epoch,
                "formulas": self.formulas,
            }
        )
        argv = [txstream, "worker", "run", "--app", "bank.stream_transfers:from_params",
                "--params", params]  # fmt: skip
        policy = Policy(max_restarts=10, window_s=60.0)
        return [
            Supervised(
                f"{self.app.name}-worker-{i}",
                [*argv, "--instance-id", str(i)],
                self.settings,
                policy=policy,
            )
            for i in range(self.w)
        ]

    def _read_back(self) -> dict[str, Any]:
        codec = self.codecs["transfer_outcomes"]
        outcomes: dict[int, str] = {}
        for p in range(self.args.partitions):
            topic = self.topics.stream("transfer_outcomes")
            for msg in read_to_committed_end(self.settings, topic, p):
                for t in codec.decode(msg.value() or b"").tuples:
                    outcomes[t["seq"]] = t["outcome"]
        state = StateCodec(self.app.dataflow(), self.registry)
        tables = committed_tables(self.settings, state, self.topics.changelog, self.args.partitions)
        balances = {k[0]: row["balance"] for k, row in tables.get("accounts", {}).items()}
        return {"outcomes": [outcomes.get(i) for i in range(len(outcomes))], "balances": balances}

    def delete_topics(self) -> None:
        admin = TopicAdmin(self.settings)
        admin.delete_topics(t for t in admin.list_topics() if t.startswith(f"{self.app.name}."))


def measure(
    settings: Settings, args: argparse.Namespace, k: int, w: int, isolation: Isolation
) -> dict[str, Any]:
    transfers = workload(args.accounts, args.transfers, args.seed)
    batches = [transfers[i : i + k] for i in range(0, len(transfers), k)]
    opening = dict.fromkeys(range(args.accounts), OPENING)
    want_outcomes, want_balances = reference(opening, batches, isolation, args.epoch, args.formulas)
    print(f"{isolation} K={k} W={w} ...", file=sys.stderr, flush=True)
    run = TransfersRun(settings, args, k, w, isolation, args.epoch, args.formulas)
    try:
        got = run.run(transfers)
    finally:
        run.delete_topics()
    total = sum(got["balances"].values())
    return {
        "isolation": isolation.value,
        "formulas": args.formulas,
        "epoch": args.epoch if isolation.epochs else None,
        "batch_size": k,
        "workers": w,
        "partitions": args.partitions,
        "transfers_per_s": round(args.transfers / got["elapsed_s"], 1),
        "done": got["outcomes"].count("done"),
        "refused": sum(1 for o in got["outcomes"] if o != "done"),
        "money_change": total - OPENING * args.accounts,
        "equals_reference": got["outcomes"] == [want_outcomes[i] for i in range(len(transfers))]
        and got["balances"] == want_balances,
    }


def passed(row: dict[str, Any]) -> bool:
    """Equal to its level's reference; and, serializable or by formulas, with no money made
    or lost."""
    loose = Isolation(row["isolation"]).epochs and not row["formulas"]
    kept: bool = row["money_change"] == 0 or loose
    return row["equals_reference"] is True and kept


COLUMNS: list[Column] = [
    ("isolation", "isolation", "s"),
    ("formulas", "formulas", "yes"),
    ("K", "batch_size", "d"),
    ("workers", "workers", "d"),
    ("partitions", "partitions", "d"),
    ("transfers/s", "transfers_per_s", ",.0f"),
    ("done", "done", ","),
    ("refused", "refused", ","),
    ("money made (+) or lost", "money_change", "+,"),
    ("equals its level's reference", "equals_reference", "yes"),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--accounts", type=int, default=10_000)
    p.add_argument("--transfers", type=int, default=20_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--batch-sizes", default="1,10")
    p.add_argument("--isolation", default="PL4", help="levels to run, e.g. PL4,PL2")
    p.add_argument("--epoch", type=int, default=16, help="batches per epoch below PL3")
    p.add_argument("--formulas", action="store_true", help="move money with table.add")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("build/bench/transfers_bench.json"))
    args = p.parse_args()
    settings = Settings()
    Stack(settings).up_kafka(lambda line: print(line, file=sys.stderr))
    levels = [Isolation.parse(level) for level in args.isolation.split(",")]
    rows = [
        measure(settings, args, int(k), int(w), level)
        for k in args.batch_sizes.split(",")
        for w in args.workers.split(",")
        for level in levels
    ]
    doc = write_report(
        "bench/transfers_bench.py",
        rows,
        args.out,
        anchor={"tspoon_pl3_per_core": TSPOON_PL3_PER_CORE},
    )
    print(markdown(rows, COLUMNS))
    per_core = max(r["transfers_per_s"] for r in rows) / (doc["machine"]["cores"] or 1)
    print(f"\nbest per core: {per_core:,.0f}/s (TSpoon PL3: {TSPOON_PL3_PER_CORE}/s per core)")
    return 0 if all(passed(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
