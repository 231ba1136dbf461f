"""Pure logic of the benchmark suite: the result check, the report's verdicts, the Quix peer's
workload logic (with a stand-in for Quix's State) and the EE-trigger chain app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.leaderboard_peers import report
from bench.leaderboard_peers.check import Measured, differences
from bench.leaderboard_peers.quix_app import Leaderboard
from bench.leaderboard_peers.txstream_partitioned import merge_boards
from chain import ee
from chain.load import batch_tuples
from leaderboard.reference_data import AREA_CODES_FILE, DEFAULT_DATA_DIR
from leaderboard.votegen import write_votes_file
from tests.support.fakes import MemoryBase
from tests.support.reference.leaderboard_ref import run_reference
from txstream.engine.partition_engine import PartitionEngine


class JsonState:
    """Quix's State as the peer uses it: values stored serialized, as JSON."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.data[key]) if key in self.data else default

    def set(self, key: str, value: Any) -> None:
        self.data[key] = json.dumps(value)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def exists(self, key: str) -> bool:
        return key in self.data


def test_quix_peer_logic_equals_the_reference(tmp_path: Path) -> None:
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 3000, contestants=12, seed=4)
    board = Leaderboard(str(DEFAULT_DATA_DIR / AREA_CODES_FILE), 12, 300, 1, 100, 7)
    state = JsonState()
    for batch_id, line in enumerate(votes.read_text().splitlines(), start=1):
        board({"batch_id": batch_id, "votes": [[int(f) for f in line.split()]]}, state)
    doc = board({"result": True}, state)["result"]
    reference = run_reference(votes, contestants=12, threshold=300, window=100, slide=7)
    assert reference["removed"]  # the run exercises removals
    assert differences(doc, reference) == []


def test_differences_name_each_wrong_key_and_the_report_flags_it() -> None:
    reference = {
        "accepted": 3,
        "rejected": {},
        "contestants": [],
        "removed": [],
        "top3": [[1, 2]],
        "bottom3": [],
        "trending3": [],
    }
    assert differences({**reference, "app": "extra keys are allowed"}, reference) == []
    wrong = differences({**reference, "top3": [[2, 2]]}, reference)
    assert wrong == ["top3: got [[2, 2]], reference [[1, 2]]"]
    base = Measured("txstream, all guarantees", "", 100, 1.0, "", reference)
    peer = Measured("peer", "", 50, 1.0, "", reference, differences=wrong)
    failed = Measured("broken peer", "", 0, 0.0, "", None, error="RuntimeError: boom")
    table = report.markdown(
        [base, peer, failed],
        {
            "date": "d",
            "machine_text": "m",
            "command": "c",
            "votes": 100,
            "params": "p",
            "cpus": "broker 0, workers and peers 1",
        },
    )
    assert "CPUs: broker 0, workers and peers 1." in table  # where each ran, named
    assert "| txstream, all guarantees | 100 | 1.00x | correct |" in table
    assert "| peer | 50 | 0.50x | **INCORRECT** (differs in top3;" in table
    assert "| broken peer |  |  | **failed**: RuntimeError: boom |" in table


def test_ee_chain_triggers_and_inline_statements_write_the_same_state() -> None:
    states = []
    for triggers in (True, False):
        app = ee.build_app(4, triggers=triggers)
        base = MemoryBase()
        engine = PartitionEngine(app.dataflow(), base, 0, app.params)
        for b in range(1, 30):
            engine.process("s0", b, batch_tuples(b, 2, seed=3))
            group = engine.take_group()
            assert group.stats.executions == 1  # one TE per batch: the triggers run inside it
            base.apply(group)
        states.append({t: rows for t, rows in base.tables.items() if t.startswith("e")})
    assert states[0] == states[1]
    assert sorted(states[0]) == ["e0", "e1", "e2", "e3"]
    key, row = next(iter(states[0]["e3"].items()))
    assert row["value"] == states[0]["e0"][key]["value"] + 3


def test_partitioned_boards_merge_by_adding_counts() -> None:
    def board(accepted: int, votes: dict[int, int], removed: list[int]) -> dict[str, Any]:
        return {
            "accepted": accepted,
            "rejected": dict.fromkeys(
                ("duplicate_vote_id", "invalid_contestant", "over_vote_limit"), 1
            ),
            "contestants": [{"contestant_number": c, "num_votes": n} for c, n in votes.items()],
            "removed": [
                {"contestant_number": c, "num_votes": 0, "at_accepted": 5} for c in removed
            ],
            "trending_all": [(c, 1) for c in votes],
        }

    merged = merge_boards([board(5, {1: 3, 2: 2}, [3]), board(4, {1: 1, 2: 1, 3: 2}, [])])
    assert merged["accepted"] == 9
    assert merged["rejected"]["over_vote_limit"] == 2
    assert merged["contestants"] == [
        {"contestant_number": 1, "num_votes": 4},
        {"contestant_number": 2, "num_votes": 3},
    ]
    assert merged["top3"] == [[1, 4], [2, 3]]
    assert merged["trending3"] == [[1, 2], [2, 2]]
