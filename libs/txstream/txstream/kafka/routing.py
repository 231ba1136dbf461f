"""Which partition engine owns a key: the same rule for every client and the coordinator."""

from __future__ import annotations

import zlib

from txstream.model.declarations import Key
from txstream.state.keys import encode_key


def partition_of(key: Key, partitions: int) -> int:
    """Stable across processes and Python versions (unlike `hash`)."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return zlib.crc32(encode_key(key)) % partitions
