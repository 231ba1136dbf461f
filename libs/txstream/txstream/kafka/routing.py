"""Which partition engine owns a key: the one rule for everything that places data by key.

The sequencer places a border-stream event by its key field with it, the coordinator and the
OLTP clients send a fragment or query to the engine it names, and test drivers and apps use
it to pick keys on a given partition. If any of them hashed differently (say `str(value)`,
or the Kafka key bytes), an OLTP transaction would look for state on an engine that never
saw it.
"""

from __future__ import annotations

import zlib

from txstream.model.declarations import Key
from txstream.state.keys import encode_key


def partition_of(key: Key, partitions: int) -> int:
    """crc32 of the key's order-preserving encoding (`state.keys.encode_key`), modulo the
    partition count: stable across processes and Python versions (unlike `hash`), and the
    int 7 and the string "7" are different keys. Raises TypeError or ValueError, naming the
    part, for a key part that is no key type (a float, a bool, an int beyond 64 bits)."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return zlib.crc32(encode_key(key)) % partitions
