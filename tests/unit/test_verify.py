"""`txstream verify`'s pure parts: the order the engine records its border batches in, how
that order picks the batches to replay, and the apps it refuses."""

from __future__ import annotations

import pytest

from bank.dataflow import build_app as bank
from leaderboard.dataflow import Params, build_app
from txstream.engine.group import BatchRun, decode_order, encode_order
from txstream.testing import AppTester
from txstream.testing.verify import Unverifiable, _ran, refuse

VOTE = {"vote_id": 1, "phone_number": 6175550101, "contestant_number": 1}


def test_the_group_records_the_border_batches_in_the_order_they_ran() -> None:
    t = AppTester(build_app(Params(contestants=3)))
    engine = t.engine
    for stream, batch_id in [("votes", 1), ("votes", 4), ("contestant_rows", 1), ("votes", 9)]:
        tuples = [{"contestant_number": 1, "contestant_name": "A", "num_votes": 0}]
        engine.process(stream, batch_id, [VOTE] if stream == "votes" else tuples)
    order = engine.take_group().order
    assert order == [
        BatchRun("votes", 1, 4),
        BatchRun("contestant_rows", 1, 1),
        BatchRun("votes", 9, 9),
    ]
    assert decode_order(encode_order(order)) == order
    assert engine.take_group().order == []  # a new group starts empty


def test_the_order_replays_the_partition_s_batches_and_skips_ids_it_never_had() -> None:
    order = [BatchRun("votes", 1, 4), BatchRun("contestant_rows", 1, 1), BatchRun("votes", 9, 9)]
    inputs = {"votes": {1: [{"v": 1}], 3: [{"v": 3}], 9: [{"v": 9}], 12: [{"v": 12}]},
              "contestant_rows": {1: [{"c": 1}]}}  # fmt: skip
    assert [(s, i) for s, i, _ in _ran(order, inputs)] == [
        ("votes", 1),
        ("votes", 3),  # 2 and 4 went to other partitions
        ("contestant_rows", 1),
        ("votes", 9),  # 12 never ran: not committed yet when the run stopped
    ]
    with pytest.raises(Unverifiable, match="'accepted_votes', not a border stream"):
        list(_ran([BatchRun("accepted_votes", 1, 1)], inputs))


def test_an_app_whose_inputs_are_not_replayed_yet_is_refused_by_name() -> None:
    refuse(build_app(Params()))  # border streams only: fine
    with pytest.raises(Unverifiable, match=r"OLTP transactions \(credit, debit, open_accounts\)"):
        refuse(bank())
    with pytest.raises(Unverifiable, match="strong recovery"):
        refuse(build_app(Params(), recovery="strong"))
