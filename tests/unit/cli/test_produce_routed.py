"""`txstream produce --route`'s placement: each batch to its participants, then the marks."""

from __future__ import annotations

from bank.stream_transfers import build_app
from txstream.cli.produce import Encoded, envelope_encoder, routed
from txstream.config import default_schema_dir
from txstream.kafka.routing import LEADER_KEY, partition_of, span_places

PARTITIONS = 4


def test_routed_batches_keep_their_own_key_but_on_the_leaders_copy() -> None:
    app = build_app("produce-routed")
    schema = app.schema_registry(default_schema_dir()).get("bank.Transfer")
    encode = envelope_encoder(schema, "transfers", "payer")
    # two accounts on different partitions, so the batch has two participants
    a = 1
    home = partition_of((a,), PARTITIONS)
    b = next(k for k in range(2, 100) if partition_of((k,), PARTITIONS) != home)
    tuples = [{"seq": 1, "payer": a, "payee": b, "amount": 5}]
    record = encode({"batch_id": 1, "tuples": tuples})
    assert record.key is not None

    out = routed([record], schema, app, "transfers", PARTITIONS)

    places = span_places(app.dataflow(), "transfers", tuples, PARTITIONS)
    first, *marks = out
    assert first.copies == ((places[0], LEADER_KEY), *((p, record.key) for p in places[1:]))
    (mark,) = marks
    assert mark == Encoded(
        None,
        mark.value,
        0,
        batch_id=1,
        copies=tuple((p, None) for p in range(PARTITIONS) if p not in places),
        mark=True,
    )
