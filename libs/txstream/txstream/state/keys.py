"""Order-preserving encoding of composite keys.

RocksDB orders keys by raw bytes, so encoding a tuple must keep its natural order: that is what
makes range and prefix scans over table keys (e.g. every vote of one contestant) possible. Each
part is a type tag followed by a self-delimiting body, so no part's encoding is a prefix of
another's; hence comparison is decided inside the first differing part, and a tuple's encoding
is a byte prefix of exactly the encodings of its extensions.

Layout per part (tags order mixed types: int < str < bytes):

- int: 0x10, then the value plus 2**63 as 8 bytes big-endian (signed 64-bit, negatives first).
- str: 0x20, then the UTF-8 bytes with each 0x00 escaped as 0x00 0xFF, then 0x00 0x01.
- bytes: 0x30, then the bytes escaped and terminated the same way.

The two-byte terminator sorts below the escape, so "a" < "a\\x00" and a shorter string sorts
before its extensions; and since escaped bodies never contain 0x00 0x01, the prefix of ("vote",)
does not match ("votes",). Lone surrogates are encoded with `surrogatepass`, which keeps code
point order, so every Python str round-trips.
"""

from __future__ import annotations

import struct

Part = int | str | bytes
Key = tuple[Part, ...]

RESERVED = b"\xff"
"""First byte that no encoded key starts with; the store keeps its metadata under it."""

_INT = 0x10
_STR = 0x20
_BYTES = 0x30
_BIAS = 1 << 63
_ESCAPED_NUL = b"\x00\xff"
_END = b"\x00\x01"
_STR_TAG = bytes([_STR])
_BYTES_TAG = bytes([_BYTES])
_INT_PART = struct.Struct(">BQ").pack


def encode_key(parts: Key) -> bytes:
    """Encode a tuple so that byte order equals tuple order (see the module docstring)."""
    # Plain ints and strs, almost every key part, are checked by exact type: a state write
    # encodes several keys, so this runs a few times per batch.
    pieces = []
    # As objects: a part of another type is named in `_other_part`'s error (compiled,
    # the loop would otherwise refuse it with a message of its own).
    items: tuple[object, ...] = parts
    for part in items:
        if type(part) is int:
            try:
                pieces.append(_INT_PART(_INT, part + _BIAS))
            except struct.error:
                raise ValueError(f"key part {part}: outside signed 64-bit range") from None
        elif type(part) is str:
            pieces.append(_str_part(part))
        else:
            pieces.append(_other_part(part))
    return b"".join(pieces)


def _other_part(part: object) -> bytes:
    """A part that is not a plain int or str: bytes, or a subclass of int, str or bytes."""
    if isinstance(part, bool):
        # bool is an int subclass, but would come back as int and break the round trip.
        raise TypeError(f"key part {part!r}: bool is not a key type")
    if isinstance(part, int):
        return encode_key((int(part),))
    if isinstance(part, str):
        return _str_part(part)
    if isinstance(part, bytes):
        return _BYTES_TAG + part.replace(b"\x00", _ESCAPED_NUL) + _END
    raise TypeError(f"key part {part!r}: type {type(part).__name__} is not a key type")


def _str_part(part: str) -> bytes:
    body = part.encode("utf-8", "surrogatepass")
    return _STR_TAG + body.replace(b"\x00", _ESCAPED_NUL) + _END


def prefix(parts: Key) -> bytes:
    """Byte prefix shared by the keys that start with `parts`, and by no other key.

    It equals `encode_key(parts)` because parts are self-delimiting; it is named separately so
    that call sites say they scan rather than look up.
    """
    return encode_key(parts)


def decode_key(data: bytes) -> Key:
    """Invert `encode_key`; raise ValueError on bytes it cannot have produced."""
    if len(data) == 9 and data[0] == _INT:  # one int, the most common key: no loop
        return (int.from_bytes(data[1:], "big") - _BIAS,)
    parts: list[Part] = []
    pos = 0
    while pos < len(data):
        tag = data[pos]
        pos += 1
        if tag == _INT:
            if pos + 8 > len(data):
                raise ValueError(f"truncated int at byte {pos - 1} of {data!r}")
            parts.append(int.from_bytes(data[pos : pos + 8], "big") - _BIAS)
            pos += 8
        elif tag in (_STR, _BYTES):
            end = data.find(_END, pos)
            if end < 0:
                raise ValueError(f"unterminated part at byte {pos - 1} of {data!r}")
            body = _unescape(data[pos:end])
            parts.append(body.decode("utf-8", "surrogatepass") if tag == _STR else body)
            pos = end + len(_END)
        else:
            raise ValueError(f"unknown type tag 0x{tag:02x} at byte {pos - 1} of {data!r}")
    return tuple(parts)


def _unescape(body: bytes) -> bytes:
    if body.count(b"\x00") != body.count(_ESCAPED_NUL):
        raise ValueError(f"unescaped NUL in key part {body!r}")
    return body.replace(_ESCAPED_NUL, b"\x00")
