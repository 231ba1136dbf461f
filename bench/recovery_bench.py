"""S-Store's Figure 8 with our recovery modes: throughput (8a) and recovery time (8b).

    .venv/bin/python bench/recovery_bench.py            # full size: a long run
    .venv/bin/python bench/recovery_bench.py --quick    # lengths 1,5,10; fewer batches

8a: the chain app (`apps/chain`, sp1..spN fused by PE triggers, 1 tuple per batch) on one
in-process PartitionTask, for each recovery mode (changelog, strong, weak) x group commit on
(100 ms or 5,000 batches) and off (a commit per input batch) x chain length. The input is
loaded first; the clock runs from `task.open()` until the last batch is committed. No
snapshots are taken.

8b: for each mode and each N, N batches are processed after a snapshot of the empty state,
the RocksDB directory is deleted (a crash), and a new task recovers: snapshot, then the whole
changelog or command log. The recovered state must equal the state before the crash.

Every configuration gets a fresh app name and a temporary home (deleted after it), and its
topics are deleted unless --keep-topics. Writes JSON (--out), fig8a_throughput.png and
fig8b_recovery.png (--figures), and prints markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

from machine_info import machine
from recovery_figures import MODES, Recovery, Throughput, plot_recovery, plot_throughput, tables
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from chain.dataflow import build_app
from chain.load import load_batches
from txstream.commit.pipeline import CommitSummary
from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.declarations import RecoveryMode
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask

ROOT = Path(__file__).resolve().parents[1]
GROUP_ON = CommitPolicy(interval_ms=100, max_batches=5000)
BORDER = "s0"


@dataclass(frozen=True)
class Preset:
    lengths: list[int]
    batches: int
    batches_off: int
    recovery_batches: list[int]


FULL = Preset(list(range(1, 11)), 5000, 300, [5000, 50000])
QUICK = Preset([1, 5, 10], 1000, 100, [1000, 5000])


# --- the machine and the command, for the docs ------------------------------------------


def command_text() -> str:
    return " ".join([".venv/bin/python bench/recovery_bench.py", *map(shlex.quote, sys.argv[1:])])


# --- one configuration --------------------------------------------------------------------


def no_snapshots(mode: RecoveryMode) -> RecoveryPolicy:
    return RecoveryPolicy(mode, snapshot_every_batches=0, snapshot_interval_s=0)


@contextmanager
def run_home(base: Settings) -> Iterator[Settings]:
    """Settings whose home (RocksDB, snapshots) is a temporary directory, deleted after."""
    home = Path(tempfile.mkdtemp(prefix="txstream-fig8-"))
    try:
        yield base.model_copy(update={"home": home})
    finally:
        shutil.rmtree(home, ignore_errors=True)


def new_app(mode: RecoveryMode, length: int, tag: str) -> App:
    return build_app(
        length, name=f"fig8-{tag}-{mode}-l{length}-{uuid.uuid4().hex[:8]}", recovery=str(mode)
    )


def delete_topics(settings: Settings, app: App) -> None:
    """Drop the app's topics, so a full run does not leave hundreds on the broker."""
    topics = AppTopics(app.name)
    names = [topics.stream(s) for s in app.decl.streams]
    names += [topics.changelog, topics.command_log, topics.aborts, topics.commits]
    try:
        TopicAdmin(settings).delete_topics(names)
    except KafkaAdminError as e:
        print(f"warning: {e}", file=sys.stderr)


def feed(
    pump: TaskPump,
    last: int,
    timeout_s: float,
    on_batches: Callable[[int], None] | None = None,
) -> int:
    """Run the pump until border batch `last` is committed; returns the group commits."""
    done, commits = 0, 0

    def committed(info: CommitSummary) -> bool:
        nonlocal done, commits
        if info.batches:
            commits += 1
            done = max(done, info.last.get(BORDER, 0))
            if on_batches is not None:
                on_batches(done)
        return done >= last

    pump.run_until(committed, timeout_s)
    return commits


def timeout_for(batches: int) -> float:
    return 120.0 + 0.2 * batches


def measure_throughput(
    base: Settings,
    mode: RecoveryMode,
    group_commit: bool,
    length: int,
    batches: int,
    keep_topics: bool,
    on_batches: Callable[[int], None],
) -> Throughput:
    commit = GROUP_ON if group_commit else CommitPolicy.off()
    tag = "gc" if group_commit else "nogc"
    with run_home(base) as settings:
        app = new_app(mode, length, tag)
        last = load_batches(settings, app, batches, batch_size=1)
        task = PartitionTask(app, 0, settings, commit, no_snapshots(mode))
        started = time.monotonic()
        positions = task.open()
        open_s = time.monotonic() - started
        pump = TaskPump(task, positions)
        try:
            commits = feed(pump, last, timeout_for(batches), on_batches)
            elapsed = time.monotonic() - started
        finally:
            pump.close()
            task.close()
        if not keep_topics:
            delete_topics(settings, app)
    rate, after_open = batches / elapsed, batches / max(elapsed - open_s, 1e-9)
    return Throughput(
        str(mode), group_commit, length, batches, commits, elapsed, rate, open_s, after_open
    )


def describe_diff(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> str:
    lost = sorted(before.keys() - after.keys())
    extra = sorted(after.keys() - before.keys())
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    lines = [
        f"{len(before)} entries before the crash, {len(after)} after recovery: "
        f"{len(lost)} lost, {len(extra)} extra, {len(changed)} different"
    ]
    for label, keys in (("lost", lost), ("extra", extra), ("different", changed)):
        for k in keys[:5]:
            lines.append(f"  {label}: {k!r}: {before.get(k)!r} -> {after.get(k)!r}")
    return "\n".join(lines)


def measure_recovery(
    base: Settings,
    mode: RecoveryMode,
    length: int,
    batches: int,
    keep_topics: bool,
    on_batches: Callable[[int], None],
) -> Recovery:
    policy = no_snapshots(mode)
    with run_home(base) as settings:
        app = new_app(mode, length, "rec")
        last = load_batches(settings, app, batches, batch_size=1)
        first = PartitionTask(app, 0, settings, GROUP_ON, policy)
        positions = first.open()
        first.snapshot()  # of the empty state: recovery must replay all N batches
        pump = TaskPump(first, positions)
        started = time.monotonic()
        try:
            feed(pump, last, timeout_for(batches), on_batches)
        except BaseException:
            first.close()
            raise
        finally:
            pump.close()
        process_s = time.monotonic() - started
        before = dict(first.partition_state.store.scan(b""))
        # the crash: RocksDB is lost; Kafka and the snapshots survive
        first.partition_state.close()
        shutil.rmtree(first.state_dir)
        del first

        second = PartitionTask(app, 0, settings, GROUP_ON, policy)
        second.open()
        try:
            after = dict(second.partition_state.store.scan(b""))
            snapshots = second.partition_state.snapshots.newest_first()
        finally:
            second.close()
        if after != before:
            sys.exit(
                f"RECOVERY MISMATCH: {mode}, chain length {length}, N={batches}: the "
                f"recovered state differs from the state before the crash\n"
                f"{describe_diff(before, after)}"
            )
        if not snapshots or second.recovered_records <= 0:
            sys.exit(
                f"RECOVERY NOT MEASURED: {mode}, N={batches}: {len(snapshots)} snapshots, "
                f"{second.recovered_records} log records replayed"
            )
        if not keep_topics:
            delete_topics(settings, app)
    return Recovery(
        str(mode),
        length,
        batches,
        process_s,
        second.recovered_s,
        second.recovered_records,
        len(after),
    )


# --- the whole run ------------------------------------------------------------------------


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )


def run_throughput(
    base: Settings, lengths: Sequence[int], batches: int, batches_off: int, keep_topics: bool
) -> list[Throughput]:
    results: list[Throughput] = []
    configs = [(m, gc, n) for gc in (True, False) for m in MODES for n in lengths]
    with progress_bar() as progress:
        overall = progress.add_task("fig 8a configurations", total=len(configs))
        for mode, gc, length in configs:
            count = batches if gc else batches_off
            label = f"{mode} gc={'on' if gc else 'off'} length={length}"
            run = progress.add_task(label, total=count)
            result = measure_throughput(
                base, mode, gc, length, count, keep_topics, updater(progress, run)
            )
            progress.update(
                run, completed=count, description=f"{label}: {result.batches_per_s:,.0f} batches/s"
            )
            progress.advance(overall)
            results.append(result)
    return results


def run_recovery(
    base: Settings, length: int, counts: Sequence[int], keep_topics: bool
) -> list[Recovery]:
    results: list[Recovery] = []
    with progress_bar() as progress:
        overall = progress.add_task("fig 8b configurations", total=len(counts) * len(MODES))
        for n in counts:
            for mode in MODES:
                label = f"{mode} N={n:,}"
                run = progress.add_task(label, total=n)
                result = measure_recovery(
                    base, mode, length, n, keep_topics, updater(progress, run)
                )
                progress.update(
                    run, completed=n, description=f"{label}: recovered in {result.recovered_s:.2f}s"
                )
                progress.advance(overall)
                results.append(result)
    return results


def updater(progress: Progress, task: TaskID) -> Callable[[int], None]:
    def update(done: int) -> None:
        progress.update(task, completed=done)

    return update


def ints(text: str) -> list[int]:
    """An argparse type: positive integers separated by commas."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas: {text}")
    return values


def positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1: {text}")
    return value


def commas(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--lengths", type=ints, help=f"chain lengths for 8a (default {commas(FULL.lengths)})"
    )
    parser.add_argument(
        "--batches",
        type=positive,
        help=f"batches per 8a run, group commit on (default {FULL.batches})",
    )
    parser.add_argument(
        "--batches-off",
        type=positive,
        help=f"batches per 8a run, group commit off (default {FULL.batches_off})",
    )
    parser.add_argument(
        "--recovery-batches",
        type=ints,
        help=f"N values for 8b (default {commas(FULL.recovery_batches)})",
    )
    parser.add_argument("--recovery-length", type=positive, default=3, help="chain length for 8b")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"lengths {commas(QUICK.lengths)}; {QUICK.batches} / {QUICK.batches_off} batches; "
        f"N = {commas(QUICK.recovery_batches)} (explicit options still win)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs/figures/recovery_bench.json")
    parser.add_argument("--figures", type=Path, default=ROOT / "docs/figures")
    parser.add_argument(
        "--keep-topics", action="store_true", help="keep each configuration's topics on the broker"
    )
    args = parser.parse_args()
    preset = QUICK if args.quick else FULL
    lengths: list[int] = args.lengths or preset.lengths
    batches: int = args.batches or preset.batches
    batches_off: int = args.batches_off or preset.batches_off
    counts: list[int] = args.recovery_batches or preset.recovery_batches

    base = Settings()
    meta: dict[str, Any] = {
        "date": str(date.today()),
        "command": command_text(),
        "machine": machine(),
        "kafka": base.bootstrap_servers,
        "lengths": lengths,
        "batches": batches,
        "batches_off": batches_off,
        "recovery_length": args.recovery_length,
        "recovery_batches": counts,
        "group_commit": asdict(GROUP_ON),
    }
    throughput = run_throughput(base, lengths, batches, batches_off, args.keep_topics)
    recovery = run_recovery(base, args.recovery_length, counts, args.keep_topics)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        **meta,
        "throughput": [asdict(r) for r in throughput],
        "recovery": [asdict(r) for r in recovery],
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    args.figures.mkdir(parents=True, exist_ok=True)
    plot_throughput(throughput, args.figures / "fig8a_throughput.png")
    plot_recovery(recovery, args.figures / "fig8b_recovery.png")
    print(tables(throughput, recovery, meta))
    print(
        f"\nwrote {args.out}, {args.figures / 'fig8a_throughput.png'} and "
        f"{args.figures / 'fig8b_recovery.png'}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
