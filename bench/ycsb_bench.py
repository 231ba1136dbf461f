"""YCSB workloads A, B and C on txstream and on PostgreSQL, in the same run.

    .venv/bin/python -m bench.ycsb_bench --records 10000 --ops 20000 --workloads a,b,c

txstream: the `ycsb` app (`apps/ycsb`) on `--workers` workers over `--partitions` partitions
with its coordinator, on the running stack's broker (`make up`); every operation is one
single-partition OLTP transaction through the Python client, `--in-flight` outstanding.
PostgreSQL: a private cluster (`bench/leaderboard_peers/postgres.py`: fsync off, synchronous
commit on, as the Leaderboard peers), `usertable` loaded with the same rows, every operation
a stored function in its own SERIALIZABLE transaction from `--clients` connections (retried
on a serialization failure, the retry inside the operation's latency).

YCSB's core workloads (read/update): A 50/50, B 95/5, C 100/0; keys Zipfian with YCSB's
constant 0.99, scrambled over the key space; an update replaces one of ten fields with 100
new characters. Both systems get the same operation list. Afterwards both tables must hold
every loaded row, and the update counts must match what each system reported committed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from bench.leaderboard_peers.postgres import private_cluster, serve
from bench.leaderboard_peers.topics import delete_topics_with
from bench.machine_info import machine, machine_text
from txstream.client import TxClient, fragment
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import common_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.oltp.messages import TxnResult
from txstream.stack.supervisor import Policy, Supervised
from ycsb.dataflow import FIELD_LENGTH, FIELDS, row_of

MIXES = {"a": 0.50, "b": 0.95, "c": 1.00}  # share of reads
ZIPF = 0.99
LOAD_CHUNK = 200


@dataclass(frozen=True)
class Op:
    read: bool
    key: int
    field: str = ""
    value: str = ""


@dataclass
class Result:
    system: str
    workload: str
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    failed: int = 0
    retries: int = 0
    reads_ms: list[float] = field(default_factory=list)  # the reads' latencies alone
    writes_ms: list[float] = field(default_factory=list)

    def done(self, op: Op, ms: float) -> None:
        self.latencies_ms.append(ms)
        (self.reads_ms if op.read else self.writes_ms).append(ms)

    def row(self) -> str:
        lat = sorted(self.latencies_ms)
        q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [0.0] * 99
        rate = len(lat) / self.seconds if self.seconds else 0.0

        def p50(xs: list[float]) -> str:
            return f"{statistics.median(xs):.1f}" if xs else "-"

        return (
            f"| {self.system} | {self.workload.upper()} | {len(lat):,} | {rate:,.0f} | "
            f"{q[49]:.1f} | {q[94]:.1f} | {q[98]:.1f} | {p50(self.reads_ms)} | "
            f"{p50(self.writes_ms)} | {self.failed} | {self.retries} |"
        )


def zipfian(n: int, rng: random.Random) -> Callable[[], int]:
    """YCSB's scrambled Zipfian generator (Gray et al.'s method), over keys 0..n-1."""
    zetan = sum(1 / (i**ZIPF) for i in range(1, n + 1))
    zeta2 = 1 + 1 / (2**ZIPF)
    alpha = 1 / (1 - ZIPF)
    eta = (1 - (2 / n) ** (1 - ZIPF)) / (1 - zeta2 / zetan)

    def rank() -> int:
        u = rng.random()
        uz = u * zetan
        if uz < 1:
            return 0
        if uz < 1 + 0.5**ZIPF:
            return 1
        return min(n - 1, int(n * (eta * u - eta + 1) ** alpha))

    def key() -> int:
        r = rank()
        h = 0xCBF29CE484222325  # FNV-1a of the rank: popular keys spread over the space
        for byte in r.to_bytes(8, "little"):
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h % n

    return key


def operations(workload: str, records: int, count: int, seed: int) -> list[Op]:
    rng = random.Random(f"{seed}-{workload}")
    key = zipfian(records, rng)
    ops = []
    for _ in range(count):
        if rng.random() < MIXES[workload]:
            ops.append(Op(True, key()))
        else:
            value = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=FIELD_LENGTH))
            ops.append(Op(False, key(), rng.choice(FIELDS), value))
    return ops


# --- txstream ------------------------------------------------------------------------------


@contextmanager
def txstream_app(
    settings: Settings,
    name: str,
    partitions: int,
    workers: int,
    factory: str = "ycsb.dataflow:from_params",
) -> Iterator[None]:
    """The app `factory` makes, named `name`, with its coordinator and `workers` workers;
    its topics are deleted afterwards: a broker left holding thousands of earlier runs'
    topics runs every later benchmark slower (docs/benchmarks.md, YCSB)."""
    ensure_topics(TopicAdmin(settings), AppTopics(name), [], partitions, oltp=True)
    app = ["--app", factory, "--params", json.dumps({"name": name})]
    txstream = str(Path(sys.executable).with_name("txstream"))
    policy = Policy(max_restarts=3, window_s=60.0)
    services = [Supervised(f"{name}-coordinator", [txstream, "coordinator", "run", *app],
                           settings, policy=policy)]  # fmt: skip
    services += [
        Supervised(
            f"{name}-worker-{i}",
            [txstream, "worker", "run", *app, "--instance-id", str(i)],
            settings,
            policy=policy,
        )
        for i in range(workers)
    ]
    for s in services:
        s.start()
    try:
        wait_for_group(settings, f"txstream-{name}", workers)
        yield
    finally:
        for s in services:
            s.stop()
        delete_topics_with(settings, [f"{name}."])


def wait_for_group(settings: Settings, group: str, members: int, timeout_s: float = 120) -> None:
    """Until every worker is in the group: a rebalance inside the measured run would stall it."""
    admin = AdminClient(common_config(settings))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        desc = admin.describe_consumer_groups([group])[group].result(30)
        if desc.state == ConsumerGroupState.STABLE and len(desc.members) == members:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the {members} workers did not join {group} in {timeout_s:.0f} s")


def txstream_load(client: TxClient, records: int, partitions: int) -> None:
    owned: dict[int, list[int]] = {}
    for k in range(records):
        owned.setdefault(partition_of((k,), partitions), []).append(k)
    chunks = [
        ks[i : i + LOAD_CHUNK] for ks in owned.values() for i in range(0, len(ks), LOAD_CHUNK)
    ]
    for chunk in chunks:
        r = client.call([fragment(chunk[0], "load", keys=chunk)], 60)
        if not r.ok:
            raise RuntimeError(f"loading keys {chunk[0]}..{chunk[-1]}: {r.reason} {r.detail}")


def txstream_run(
    client: TxClient,
    workload: str,
    ops: list[Op],
    in_flight: int,
    system: str = "txstream",
    committed_reads: bool = True,
) -> Result:
    result = Result(system, workload)
    done_at: dict[Future[TxnResult], float] = {}
    pending: dict[Future[TxnResult], tuple[float, Op]] = {}
    # answers arrive here as they come: the loop takes each once, where waiting on every
    # outstanding future each time cost this process a sixth of its CPU at 256 in flight
    answered: queue.SimpleQueue[Future[TxnResult]] = queue.SimpleQueue()

    def finished(f: Future[TxnResult]) -> None:
        done_at[f] = time.perf_counter()
        answered.put(f)

    started = time.perf_counter()
    sent = 0
    while sent < len(ops) or pending:
        while sent < len(ops) and len(pending) < in_flight:
            op = ops[sent]
            if op.read:
                frag = fragment(op.key, "read", id=op.key)
                future: Future[TxnResult] = (
                    client.submit_read_only([frag]) if committed_reads else client.submit([frag])
                )
            else:
                frag = fragment(op.key, "update", id=op.key, field=op.field, value=op.value)
                future = client.submit([frag])
            pending[future] = (time.perf_counter(), op)
            future.add_done_callback(finished)
            sent += 1
        try:
            complete = [answered.get(timeout=60)]
        except queue.Empty:
            raise RuntimeError(
                f"no answer in 60 s with {len(pending)} operations outstanding"
            ) from None
        with suppress(queue.Empty):
            while True:
                complete.append(answered.get_nowait())
        for f in complete:
            t0, done_op = pending.pop(f)
            if f.result().ok:
                result.done(done_op, (done_at[f] - t0) * 1000)
            else:
                result.failed += 1
    result.seconds = time.perf_counter() - started
    return result


def _client_process(
    name: str, ops: list[Op], in_flight: int, path: str, committed_reads: bool,
    start: Any, out: Any,
) -> None:  # fmt: skip
    """One of several client processes: its own TxClient, its share of the operations."""
    with client_for(name, Settings(), path) as client:
        client.call([fragment(ops[0].key, "read", id=ops[0].key)], read_only=committed_reads)
        start.wait()  # every process connected and warm: they start together
        r = txstream_run(client, "", ops, in_flight, committed_reads=committed_reads)
    out.put((r.seconds, r.reads_ms, r.writes_ms, r.failed))


def txstream_processes(
    name: str,
    workload: str,
    ops: list[Op],
    in_flight: int,
    processes: int,
    path: str,
    committed_reads: bool,
    system: str,
) -> Result:
    """The operations dealt round-robin to `processes` client processes, `in_flight` shared
    among them; ops/s over the slowest one's time."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(processes + 1), ctx.Queue()
    share = max(1, in_flight // processes)
    procs = [
        ctx.Process(target=_client_process,
                    args=(name, ops[i::processes], share, path, committed_reads, start, out))
        for i in range(processes)
    ]  # fmt: skip
    for proc in procs:
        proc.start()
    try:
        start.wait(300)
        result = Result(system, workload)
        for _ in procs:
            seconds, reads_ms, writes_ms, failed = out.get(timeout=600)
            result.seconds = max(result.seconds, seconds)
            result.reads_ms += reads_ms
            result.writes_ms += writes_ms
            result.latencies_ms += reads_ms + writes_ms
            result.failed += failed
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return result


PATHS = ("direct", "endpoint", "coordinator")


def client_for(name: str, settings: Settings, path: str) -> TxClient:
    """A client whose single-partition writes take `path` (one of PATHS)."""
    via = "endpoint" if path == "endpoint" else "kafka"
    return TxClient(name, settings, direct=path != "coordinator", direct_via=via)


def txstream_rows(client: TxClient) -> int:
    r = client.query("usertable", aggregates=[("count", "")], timeout_s=60)
    return int(r.table_rows()[0][1]["count"]) if r.ok else -1


# --- PostgreSQL ----------------------------------------------------------------------------

SCHEMA = f"""
CREATE TABLE usertable (id bigint PRIMARY KEY, {", ".join(f"{f} text" for f in FIELDS)});
CREATE FUNCTION ycsb_read(k bigint) RETURNS SETOF usertable
  AS $$ SELECT * FROM usertable WHERE id = k $$ LANGUAGE sql STABLE;
CREATE FUNCTION ycsb_update(k bigint, f text, v text) RETURNS int AS $$
BEGIN
  EXECUTE format('UPDATE usertable SET %I = $1 WHERE id = $2', f) USING v, k;
  RETURN 1;
END $$ LANGUAGE plpgsql;
"""


def pg_load(dsn: str, records: int) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(SCHEMA)
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY usertable (id, {', '.join(FIELDS)}) FROM STDIN") as copy,
        ):
            for k in range(records):
                row = row_of(k)
                copy.write_row([k, *(row[f] for f in FIELDS)])
        conn.execute("ANALYZE usertable")


def pg_run(dsn: str, workload: str, ops: list[Op], clients: int) -> Result:
    result = Result("PostgreSQL", workload)
    lock = threading.Lock()

    def each(conn: psycopg.Connection[Any], op: Op) -> None:
        t0 = time.perf_counter()
        ok, retries = pg_op(conn, op)
        elapsed = (time.perf_counter() - t0) * 1000
        with lock:
            result.retries += retries
            if ok:
                result.done(op, elapsed)
            else:
                result.failed += 1

    result.seconds = serve(dsn, ops, clients, each)
    return result


def pg_op(conn: psycopg.Connection[tuple[object, ...]], op: Op) -> tuple[bool, int]:
    for attempt in range(10):
        try:
            if op.read:
                conn.execute("SELECT * FROM ycsb_read(%s)", (op.key,)).fetchall()
            else:
                conn.execute("SELECT ycsb_update(%s, %s, %s)", (op.key, op.field, op.value))
            conn.commit()
            return True, attempt
        except psycopg.errors.SerializationFailure:
            conn.rollback()
    return False, 10


def pg_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM usertable").fetchone()
        return int(row[0]) if row else -1


# --- the run -------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--ops", type=int, default=20_000, help="operations per workload and system")
    p.add_argument("--workloads", default="a,b,c")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--in-flight", type=int, default=256, help="txstream: outstanding operations")
    p.add_argument("--clients", type=int, default=8, help="PostgreSQL: connections")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--paths",
        default="direct",
        help="txstream's paths for single-partition operations, comma-separated: direct "
        "(client to the partition's engine through Kafka), endpoint (to the owning worker's "
        "endpoint over HTTP) and/or coordinator (through the coordinator)",
    )
    p.add_argument(
        "--reads",
        choices=["committed", "transaction"],
        default="committed",
        help="txstream's reads: read-only calls on the owning worker's committed state "
        "(its query endpoint), or transactions on the path of --paths",
    )
    p.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="txstream: client processes sharing the operations and --in-flight (each its "
        "own TxClient, reading its own replies)",
    )
    p.add_argument(
        "--systems",
        default="txstream,postgresql",
        help="which systems run, comma-separated: txstream and/or postgresql (one alone for "
        "profiling; ratios need both)",
    )
    args = p.parse_args()
    chosen = {s.strip().lower() for s in args.systems.split(",")}
    if not chosen or not chosen <= {"txstream", "postgresql"}:
        p.error(f"--systems {args.systems!r}: txstream and/or postgresql")
    workloads = [w.strip().lower() for w in args.workloads.split(",")]
    unknown = [w for w in workloads if w not in MIXES]
    if unknown:
        p.error(f"unknown workloads {unknown}: YCSB's read/update ones are {sorted(MIXES)}")
    plans = {w: operations(w, args.records, args.ops, args.seed) for w in workloads}
    settings = Settings()
    name = f"ycsb-{uuid.uuid4().hex[:8]}"
    results: list[Result] = []
    problems: list[str] = []
    print(
        f"txstream: {name}, {args.workers} workers, {args.partitions} partitions", file=sys.stderr
    )
    paths = [p.strip() for p in args.paths.split(",")]
    if not set(paths) <= set(PATHS):
        p.error(f"--paths {args.paths!r}: each is one of {', '.join(PATHS)}")
    systems = {path: "txstream" if paths == ["direct"] else f"txstream ({path})" for path in paths}
    with txstream_app(settings, name, args.partitions, args.workers):
        for path in paths if "txstream" in chosen else []:
            with client_for(name, settings, path) as c:
                txstream_load(c, args.records, args.partitions)
                for w in workloads:
                    if args.client_processes > 1:
                        run = txstream_processes(
                            name, w, plans[w], args.in_flight, args.client_processes,
                            path, args.reads == "committed", systems[path],
                        )  # fmt: skip
                    else:
                        run = txstream_run(c, w, plans[w], args.in_flight, systems[path],
                                           args.reads == "committed")  # fmt: skip
                    results.append(run)
                    print(results[-1].row(), file=sys.stderr)
                if (n := txstream_rows(c)) != args.records:
                    problems.append(f"txstream holds {n} rows, not {args.records}")
    version = "not run"
    if "postgresql" in chosen:
        with private_cluster() as cluster:
            print(f"PostgreSQL {cluster.version}, {args.clients} connections", file=sys.stderr)
            pg_load(cluster.dsn, args.records)
            for w in workloads:
                results.append(pg_run(cluster.dsn, w, plans[w], args.clients))
                print(results[-1].row(), file=sys.stderr)
            if (n := pg_rows(cluster.dsn)) != args.records:
                problems.append(f"PostgreSQL holds {n} rows, not {args.records}")
            version = cluster.version
    m = machine()
    print(f"Date: {date.today()}. Machine: {machine_text(m)}. PostgreSQL {version}. Command: "
          f"`.venv/bin/python -m bench.ycsb_bench {' '.join(sys.argv[1:])}`.")  # fmt: skip
    print("| system | workload | ops | ops/s | p50 ms | p95 ms | p99 ms | reads p50 ms | "
          "writes p50 ms | failed | retries |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(r.row())
    rates = {(r.system, r.workload): len(r.latencies_ms) / r.seconds for r in results}
    for w in workloads if chosen == {"txstream", "postgresql"} else []:
        for system in systems.values():
            ratio = rates[(system, w)] / rates[("PostgreSQL", w)]
            print(f"workload {w.upper()}: {system} / PostgreSQL = {ratio:.2f}x ops/s")
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
