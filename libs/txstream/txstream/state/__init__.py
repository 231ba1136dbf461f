"""Partition state: order-preserving composite keys and the RocksDB store they index."""

from txstream.state.keys import decode_key, encode_key, prefix
from txstream.state.store import StateStore, StateStoreCorruption, StateStoreError

__all__ = [
    "StateStore",
    "StateStoreCorruption",
    "StateStoreError",
    "decode_key",
    "encode_key",
    "prefix",
]
