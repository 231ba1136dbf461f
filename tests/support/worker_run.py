"""A leaderboard worker as a child process on inputs loaded up front, for state faults."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from leaderboard.commits import recovered_tables, wait_for_batches
from leaderboard.dataflow import Params, build_app
from leaderboard.loader import Loader
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from leaderboard.votes_file import validate_votes_file
from tests.support.kafka_reads import read_to_end
from tests.support.reference.leaderboard_ref import run_reference
from tests.support.sequencer_driver import unique, wait_until
from tests.support.service_process import TXSTREAM, ServiceProcess
from txstream.config import Settings
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import RecoveryMode
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.supervisor import Policy, Supervised

PARAMS = Params(contestants=12, threshold=300, window=50, slide=5)


class LeaderboardWorker:
    """Inputs on Kafka, then `txstream worker run` incarnations over them."""

    def __init__(self, settings: Settings, tmp: Path, mode: RecoveryMode, votes: int, seed: int):
        self.settings, self.tmp = settings, tmp
        self.votes = tmp / "votes.txt"
        write_votes_file(self.votes, votes, contestants=PARAMS.contestants, seed=seed)
        self.app = build_app(PARAMS, name=unique("lbfault"), recovery=mode)
        self.commits = AppTopics(self.app.name).commits
        self.loader = Loader(settings, self.app)
        self.loader.load_reference_data()
        self.last = 0
        self._loading: threading.Thread | None = None
        self._load_error: BaseException | None = None
        self.rng = random.Random(seed)
        self.mode = mode
        settings.log_dir.mkdir(parents=True, exist_ok=True)
        self.log = settings.log_dir / "worker.log"  # where the supervisor writes it, too

    @property
    def state_dir(self) -> Path:
        return self.settings.data_dir / "engines" / self.app.name / "p0"

    def args(self) -> list[str]:
        params = json.dumps({**asdict(PARAMS), "name": self.app.name, "recovery": str(self.mode)})
        return ["worker", "run", "--app", "leaderboard.dataflow:from_params", "--params", params,
                "--snapshot-every-batches", "300"]  # fmt: skip

    def start(self, before_load: Callable[[], None] = lambda: None) -> ServiceProcess:
        """The first incarnation, unsupervised, to be SIGKILLed by the test."""
        proc = ServiceProcess(self.settings, self.args(), self.log)
        self.load_votes(proc.alive, before_load)
        return proc

    def start_paced(self, rate: float) -> ServiceProcess:
        """The first incarnation, fed about `rate` batches/s from a thread: the worker runs
        faster than that, so a kill at any batch before the last lands while votes are still
        arriving, and the next incarnation has work left after it rebuilt its state."""
        proc = ServiceProcess(self.settings, self.args(), self.log)
        self.wait_for_reference(proc.alive)
        self.last = validate_votes_file(self.votes)  # one vote per batch
        every = 100
        began = time.monotonic()

        def pace(last: int) -> None:  # rate-limits the input; waits for no condition
            time.sleep(max(0.0, began + last / rate - time.monotonic()))

        def load() -> None:
            try:
                self.loader.load_votes(self.votes, 1, progress=pace, commit_every=every)
            except BaseException as e:  # re-raised in the test's thread, by run_to_end
                self._load_error = e

        self._loading = threading.Thread(target=load, name="paced-votes")
        self._loading.start()
        return proc

    def load_votes(
        self, alive: Callable[[], bool], before_load: Callable[[], None] = lambda: None
    ) -> None:
        """As a user's client would: the votes, once the reference data is committed."""
        self.wait_for_reference(alive)
        before_load()
        self.last = self.loader.load_votes(self.votes, batch_size=1)

    def wait_for_reference(self, alive: Callable[[], bool]) -> None:
        reference = {"contestant_rows": 1, "area_code_rows": 1}
        wait_for_batches(self.settings, self.commits, reference, 120, alive)

    def supervised(self) -> Supervised:
        return Supervised("worker", [TXSTREAM, *self.args()], self.settings,
                          policy=Policy(max_restarts=20, window_s=60.0))  # fmt: skip

    def wait_for(self, proc: ServiceProcess, batch: int, timeout_s: float = 180) -> None:
        wait_for_batches(self.settings, self.commits, {"votes": batch}, timeout_s, proc.alive)

    def run_to_end(self, timeout_s: float = 240) -> int:
        """Supervised incarnations until every batch is committed and one of them has
        recovered its partition; returns the restarts.

        The first incarnation may have committed every batch before it was killed; without
        the wait for recovery the test would stop the next one before it rebuilt anything.
        """
        if self._loading is not None:
            self._loading.join()
            if self._load_error is not None:
                raise self._load_error
        since = self.log.stat().st_size if self.log.exists() else 0
        worker = self.supervised()
        worker.start()
        try:
            alive = lambda: worker.supervisor.live_pid() is not None  # noqa: E731
            wait_for_batches(self.settings, self.commits, {"votes": self.last}, timeout_s, alive)
            wait_until(lambda: self.recovered_since(since), timeout_s, alive, "recovery")
            return worker.restarts()
        finally:
            worker.stop()

    def recovered_since(self, offset: int) -> bool:
        with self.log.open("rb") as f:
            f.seek(offset)
            return b"recovered p0:" in f.read()

    def check_result(self) -> None:
        expected = run_reference(self.votes, **asdict(PARAMS))
        got = result_document(recovered_tables(self.settings, self.app))
        wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
        assert not wrong, f"result differs from the reference (got, expected): {wrong}"

    def check_exactly_once(self) -> None:
        registry = SchemaRegistry(self.settings.schema_dir)
        codec = BatchCodec(registry.get("leaderboard.AcceptedVote"))
        topic = f"{self.app.name}.accepted_votes"
        ids = sorted(codec.decode(v).batch_id for _, v in read_to_end(self.settings, topic))
        assert ids == list(range(1, self.last + 1)), "each batch exactly once on accepted_votes"
