"""The benchmark's PostgreSQL peers on a real, private PostgreSQL cluster: the three SQL
procedures give the reference result, and a redelivered record cannot claim its offset twice."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from bench.leaderboard_peers import sync_oltp
from bench.leaderboard_peers.check import differences
from bench.leaderboard_peers.postgres import private_cluster
from bench.leaderboard_peers.sql_leaderboard import CLAIM
from leaderboard.dataflow import Params
from leaderboard.votegen import write_votes_file
from tests.support.reference.leaderboard_ref import run_reference

pytestmark = pytest.mark.kafka


def test_sql_procedures_equal_the_reference_and_offsets_are_claimed_once(tmp_path: Path) -> None:
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 2000, contestants=12, seed=9)
    params = Params(contestants=12, threshold=250, window=100, slide=7)
    reference = run_reference(votes, 12, 250, 1, 100, 7, batch_size=3)
    assert reference["removed"]
    with private_cluster() as cluster:
        measured = sync_oltp.run(cluster.dsn, votes, params, batch_size=3)
        assert measured.batches == 667
        assert measured.doc is not None
        assert differences(measured.doc, reference) == []
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            claims = [
                conn.execute(CLAIM, {"source": "votes/0", "offset": offset}).rowcount
                for offset in (0, 1, 1, 0, 2)
            ]
        assert claims == [1, 1, 0, 0, 1]
