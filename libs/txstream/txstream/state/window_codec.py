"""A window's state record, put together from its tuples' encodings, each made once.

A window's state is one changelog record holding every tuple in it, written at each commit
that changed the window. fastavro takes ~3.6 µs a tuple each way, so a Leaderboard window of
110 tuples cost ~0.4 ms to encode at every commit, and as much to decode after it, however
few batches the commit held: with the 10 ms commits of a worker that keeps up, that was most
of its work per commit (docs/performance-history.md, 2026-11-28). A window moves by a few tuples per
commit, so here each tuple is encoded once, with its decoded form, and both are kept while
the tuple stays in the window. Avro's binary encoding of a record is its fields' encodings
in order, and of an array its count, its items and a zero, so the state's record is those
parts joined. The decoded state is built from the tuples' decoded forms: it is what reading
the record back from RocksDB would give, without the read. A tuple whose encoding decodes
back to that very tuple (`RecordEncoder.encode`) is its own decoded form, and is not
decoded at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastavro import parse_schema
from fastavro.types import Schema

from txstream.engine.rows import is_flat
from txstream.engine.windows import Row, WindowState
from txstream.schemas.records import RecordEncoder, decode_record
from txstream.schemas.writers import long_bytes

# id(tuple) -> (the tuple, its encoding, that decoded, whether the decoded tuple is flat);
# the tuple itself is kept so that its id cannot be reused while the entry lives
_Entry = tuple[Row, bytes, Row, bool]


class WindowCodec:
    """Encodes one window's states (`win.state_schema` of its tuple schema).

    Safe to share between threads: an entry is checked against the tuple it was made for,
    and the table of entries is replaced whole, so a race only costs a tuple's encoding."""

    def __init__(self, tuple_schema: Schema) -> None:
        self.tuple_schema = parse_schema(tuple_schema)
        self._encode = RecordEncoder(self.tuple_schema)
        self._entries: dict[int, _Entry] = {}

    def encode(self, state: WindowState) -> tuple[bytes, WindowState]:
        """The state's record, and the state as decoding that record gives it back."""
        entries: dict[int, _Entry] = {}
        parts: list[bytes] = []
        staged = self._array(state.staged, entries, parts)
        visible = self._array(state.visible, entries, parts)
        if state.boundary is None:
            parts.append(b"\x00")
        else:
            parts += (b"\x02", long_bytes(state.boundary))
        self._entries = entries  # only the tuples still in the window are kept
        flat = all(entries[id(t)][3] for t in (*staged, *visible))
        return b"".join(parts), WindowState(staged, visible, state.boundary, flat)

    def _array(
        self, rows: Sequence[Row], entries: dict[int, _Entry], parts: list[bytes]
    ) -> tuple[Row, ...]:
        known = self._entries
        decoded = []
        if rows:
            parts.append(long_bytes(len(rows)))
        for row in rows:
            entry = known.get(id(row))
            if entry is None or entry[0] is not row:
                data, same = self._encode.encode(row)
                back = row if same else decode_record(self.tuple_schema, data)
                entry = (row, data, back, is_flat(back))
            entries[id(row)] = entry
            back = entry[2]
            if back is not row:  # the next state, read from the committed one, holds `back`
                entries[id(back)] = (back, entry[1], back, entry[3])
            parts.append(entry[1])
            decoded.append(back)
        parts.append(b"\x00")
        return tuple(decoded)
