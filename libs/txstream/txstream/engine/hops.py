"""Repartitioned edges: a procedure's input, sent to the engines owning each tuple's new key.

A procedure declared with `partition_by` does not run where its input is made. When the
producing TE ends, its output batch is split by the new key's owner (the library's one
routing function), and each part becomes an output of that TE for the procedure's own
topic, partition q, keyed by the sending engine. It commits with the TE's group, in the
same Kafka transaction as its state and input positions, so it is sent exactly once. The
engine owning partition q reads the topic read_committed and runs the procedure on each part
as one TE, committing the topic position with its effects: exactly once across the hop.

Each sender's parts reach an engine in that sender's batch order; parts from different
senders are taken as they arrive (in commit order), not merged into batch-id order.

A tuple whose new key cannot be had (no such field, the function raised, a value that is
no key) aborts the producing TE, naming the procedure, tuple and reason: sending it
anywhere would put its effects on an engine that does not own them.
"""

from __future__ import annotations

from collections.abc import Sequence

from txstream.engine.group import OutputBatch
from txstream.engine.spanning import Owner
from txstream.model.declarations import Key, Procedure, Record
from txstream.model.errors import TxnAbort, exception_detail


def route(proc: Procedure, out: OutputBatch, owner: Owner) -> list[OutputBatch]:
    """`out`'s tuples, split by the engine owning their new key for `proc`, in tuple order."""
    parts: dict[int, list[Record]] = {}
    for i, tup in enumerate(out.tuples):
        parts.setdefault(_place(proc, out.stream, i, tup, owner), []).append(tup)
    return [
        OutputBatch(out.stream, out.batch_id, tuples, hop=proc.name, partition=q)
        for q, tuples in sorted(parts.items())
    ]


def hop_batches(
    hops: Sequence[Procedure], outputs: Sequence[OutputBatch], owner: Owner
) -> list[OutputBatch]:
    """The parts of `outputs` for the repartitioned procedures reading their streams."""
    routed: list[OutputBatch] = []
    for out in outputs:
        for proc in hops:
            if proc.input == out.stream and out.tuples:
                routed += route(proc, out, owner)
    return routed


def _place(proc: Procedure, stream: str, i: int, tup: Record, owner: Owner) -> int:
    where = f"tuple {i} of stream {stream!r} for repartitioned procedure {proc.name!r}"
    by = proc.partition_by
    try:
        if isinstance(by, str):
            if by not in tup:
                raise TxnAbort("partition_key", f"{where}: it has no field {by!r}")
            key = tup[by]
        else:
            assert by is not None
            key = by(tup)
        return owner(_as_key(key))
    except TxnAbort:
        raise
    except Exception as e:
        raise TxnAbort("partition_key", f"{where}: no key: {exception_detail(e)}") from e


def _as_key(value: object) -> Key:
    if isinstance(value, tuple):
        return value
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return (value,)
    raise TypeError(f"{value!r} is a {type(value).__name__}, not an int, str or tuple of them")
