"""Key encoding: byte order equals tuple order, round trips, and prefixes select exactly."""

from __future__ import annotations

import enum
import itertools
import random

import pytest

from txstream.state.keys import RESERVED, Key, Part, decode_key, encode_key, prefix

_TYPE_RANK = {int: 0, str: 1, bytes: 2}
_INT_EDGES = [-(2**63), -(2**63) + 1, -256, -1, 0, 1, 255, 256, 2**32, 2**63 - 1]
# Characters around the escape and terminator bytes, multi-byte UTF-8, a lone surrogate, astral.
_CHARS = ["\x00", "\x01", "\x7f", "\xff", "a", "b", "é", "\u07ff", "\ud800", "\uffff", "😀"]
_BYTES = [b"\x00", b"\x01", b"\xfe", b"\xff", b"a"]


def natural(key: Key) -> tuple[tuple[int, Part], ...]:
    """The order the encoding promises: by type tag first, then by value; prefixes first."""
    return tuple((_TYPE_RANK[type(part)], part) for part in key)


def random_part(rng: random.Random) -> Part:
    kind = rng.randrange(3)
    if kind == 0:
        return rng.choice(_INT_EDGES) if rng.random() < 0.5 else rng.randint(-(2**63), 2**63 - 1)
    if kind == 1:
        return "".join(rng.choice(_CHARS) for _ in range(rng.randrange(4)))
    return b"".join(rng.choice(_BYTES) for _ in range(rng.randrange(4)))


def random_keys(seed: int, count: int) -> list[Key]:
    """Keys drawn from a small pool of parts, so shared prefixes and ties are common."""
    rng = random.Random(seed)
    pool = [random_part(rng) for _ in range(12)]
    return [tuple(rng.choice(pool) for _ in range(rng.randrange(5))) for _ in range(count)]


def sign(x: int) -> int:
    return (x > 0) - (x < 0)


def compare(a: object, b: object) -> int:
    return sign((a > b) - (a < b))  # type: ignore[operator]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_byte_order_equals_tuple_order(seed: int) -> None:
    keys = random_keys(seed, 250)
    encoded = [encode_key(k) for k in keys]
    for (ka, ea), (kb, eb) in itertools.combinations(zip(keys, encoded, strict=True), 2):
        assert compare(ea, eb) == compare(natural(ka), natural(kb)), (ka, kb)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_round_trip_keeps_values_and_types(seed: int) -> None:
    for key in random_keys(seed, 500):
        decoded = decode_key(encode_key(key))
        assert decoded == key
        assert [type(p) for p in decoded] == [type(p) for p in key]


@pytest.mark.parametrize("seed", [7, 8])
def test_prefix_selects_exactly_the_extensions(seed: int) -> None:
    keys = random_keys(seed, 200)
    rng = random.Random(seed)
    for key in keys:
        head = key[: rng.randrange(len(key) + 1)]
        p = prefix(head)
        for other in keys:
            assert encode_key(other).startswith(p) == (other[: len(head)] == head), (head, other)


def test_no_key_starts_with_the_reserved_byte() -> None:
    for key in random_keys(9, 500):
        assert not encode_key(key).startswith(RESERVED)


def test_string_edge_order() -> None:
    ordered: list[Key] = [
        (),
        ("",),
        ("", 0),
        ("a",),
        ("a", -1),
        ("a", 0),
        ("a", "z"),
        ("a\x00",),
        ("a\x00\x00",),
        ("a\x01",),
        ("ab",),
        ("b",),
        ("\uffff",),
        ("😀",),
    ]
    encoded = [encode_key(k) for k in ordered]
    assert encoded == sorted(encoded)
    assert len(set(encoded)) == len(encoded)


def test_mixed_types_order_int_str_bytes() -> None:
    assert encode_key((2**63 - 1,)) < encode_key(("",)) < encode_key((b"",))


def test_votes_prefix_scan_shape() -> None:
    contestant_7 = prefix(("votes_by_contestant", 7))
    assert encode_key(("votes_by_contestant", 7, 123)).startswith(contestant_7)
    assert not encode_key(("votes_by_contestant", 70, 1)).startswith(contestant_7)
    assert not encode_key(("votes_by_contestant", -7, 1)).startswith(contestant_7)
    assert not encode_key(("votes",)).startswith(prefix(("vote",)))
    assert not encode_key(("vote\x00s",)).startswith(prefix(("vote",)))


@pytest.mark.parametrize("bad", [True, 1.5, None, bytearray(b"x"), 2**63, -(2**63) - 1])
def test_unsupported_parts_are_rejected(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        encode_key((bad,))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        b"\x99",  # unknown tag
        b"\x10\x00\x00",  # truncated int
        b"\x20abc",  # unterminated string
        b"\x30a\x00\x00\x01",  # NUL neither escaped nor terminating
        b"\x20\xc0\xaf\x00\x01",  # overlong UTF-8
    ],
)
def test_malformed_bytes_are_rejected(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_key(data)


def test_subclasses_of_int_and_str_encode_as_their_values() -> None:
    """Plain ints and strs take a fast path by exact type; their subclasses (enums, say)
    must still encode as the values they stand for, and bool must still be refused."""

    class Code(enum.IntEnum):
        SEVEN = 7

    class Name(enum.StrEnum):
        ANN = "ann"

    class Shouted(str):
        def __str__(self) -> str:
            return self.upper()

    assert encode_key((Code.SEVEN, Name.ANN)) == encode_key((7, "ann"))
    assert encode_key((Shouted("ann"),)) == encode_key(("ann",))  # its value, not its str()
    assert decode_key(encode_key((Code.SEVEN, Name.ANN))) == (7, "ann")
    with pytest.raises(TypeError):
        encode_key((False,))
