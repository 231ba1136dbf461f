"""Seeded vote generator with the semantics of S-Store's voter PhoneCallGenerator.

S-Store (H-Store's `edu.brown.benchmark.voter.PhoneCallGenerator`, reused by its
`voterexperiments` leaderboard benchmarks) generates each call like this:

- once, per area code at position i of its 305-code list: the favourite contestant is 1 with
  probability 30%, otherwise `floor(|sin(i)| * N) + 1`;
- per call: a uniform area code; the contestant is that area's favourite, replaced with
  probability 1/2 by a uniform contestant in 1..N, and then with probability 1/100 by the
  invalid contestant 999; the phone number is `area_code * 10**7 + uniform(0 .. 10**7-1)`;
  vote ids increase by one.

Two deliberate departures, both parameters. S-Store's 3.05e9 phone numbers almost never
repeat (about 1.6 repeats in 100k calls), so `over_vote_limit` would never be exercised: by
default each area code has 5,000 subscribers (1.5M phones), which makes roughly 3% of 100k
votes repeat a phone; their 7-digit suffixes are spread over the whole space by a fixed
bijection, so they still look like phone numbers, and `subscribers_per_area=10**7` gives
S-Store's space exactly. And a fraction of lines (default 0.2%) are re-sends, exact copies of
one of the last 100 new votes, so that `duplicate_vote_id` is exercised too; new votes still
get ids 1, 2, 3, ...
"""

from __future__ import annotations

import argparse
import math
import random
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

from leaderboard.reference_data import load_area_code_states
from leaderboard.votes_file import Vote, write_votes

FAVOURITE_IS_ONE = 0.30
UNIFORM_CONTESTANT = 0.5
INVALID_ONE_IN = 100
INVALID_CONTESTANT = 999
PHONE_SUFFIX_SPACE = 10**7
S_STORE_SUBSCRIBERS_PER_AREA = PHONE_SUFFIX_SPACE
DEFAULT_SUBSCRIBERS_PER_AREA = 5_000
DEFAULT_RESEND_FRACTION = 0.002
RESEND_HORIZON = 100
# Subscriber s of an area gets suffix (OFFSET + s * STRIDE) mod 10**7: a bijection (STRIDE is
# prime to 10), so a small subscriber pool still spreads over the 7-digit space and looks like
# phone numbers, and the full pool is all of it, exactly S-Store's space.
_SUFFIX_OFFSET = 2_718_281
_SUFFIX_STRIDE = 7_654_321


def _favourites(area_count: int, contestants: int, rng: random.Random) -> list[int]:
    """S-Store's per-area favourite, by the area code's position in the list."""
    return [
        1 if rng.random() < FAVOURITE_IS_ONE else int(abs(math.sin(i) * contestants)) + 1
        for i in range(area_count)
    ]


def generate_votes(
    count: int,
    contestants: int = 50,
    seed: int = 0,
    *,
    resend_fraction: float = DEFAULT_RESEND_FRACTION,
    subscribers_per_area: int = DEFAULT_SUBSCRIBERS_PER_AREA,
) -> Iterator[Vote]:
    """`count` votes, the same ones for the same arguments (and a prefix of a longer run)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not 1 <= contestants < INVALID_CONTESTANT:
        raise ValueError(f"contestants must be in 1..{INVALID_CONTESTANT - 1}, got {contestants}")
    if not 0.0 <= resend_fraction < 1.0:
        raise ValueError(f"resend fraction must be in [0, 1), got {resend_fraction}")
    if not 1 <= subscribers_per_area <= PHONE_SUFFIX_SPACE:
        raise ValueError(
            f"subscribers per area must be in 1..{PHONE_SUFFIX_SPACE}, got {subscribers_per_area}"
        )
    area_codes = list(load_area_code_states())
    return _votes(
        count, contestants, random.Random(seed), resend_fraction, subscribers_per_area, area_codes
    )


def _votes(
    count: int,
    contestants: int,
    rng: random.Random,
    resend_fraction: float,
    subscribers_per_area: int,
    area_codes: list[int],
) -> Iterator[Vote]:
    favourites = _favourites(len(area_codes), contestants, rng)
    recent: deque[Vote] = deque(maxlen=RESEND_HORIZON)
    next_id = 1
    for _ in range(count):
        if recent and resend_fraction and rng.random() < resend_fraction:
            yield rng.choice(recent)
            continue
        area = rng.randrange(len(area_codes))
        contestant = favourites[area]
        if rng.random() < UNIFORM_CONTESTANT:
            contestant = rng.randrange(contestants) + 1
        if rng.randrange(INVALID_ONE_IN) == 0:
            contestant = INVALID_CONTESTANT
        subscriber = rng.randrange(subscribers_per_area)
        suffix = (_SUFFIX_OFFSET + subscriber * _SUFFIX_STRIDE) % PHONE_SUFFIX_SPACE
        phone = area_codes[area] * PHONE_SUFFIX_SPACE + suffix
        vote = Vote(next_id, phone, contestant)
        recent.append(vote)
        next_id += 1
        yield vote


def write_votes_file(
    path: Path | str,
    count: int,
    contestants: int = 50,
    seed: int = 0,
    *,
    resend_fraction: float = DEFAULT_RESEND_FRACTION,
    subscribers_per_area: int = DEFAULT_SUBSCRIBERS_PER_AREA,
) -> int:
    """Generate votes into a votes file; returns how many lines were written."""
    votes = generate_votes(
        count,
        contestants,
        seed,
        resend_fraction=resend_fraction,
        subscribers_per_area=subscribers_per_area,
    )
    return write_votes(path, votes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m leaderboard.votegen", description="Write a leaderboard votes file."
    )
    parser.add_argument("--count", type=int, required=True, help="number of lines")
    parser.add_argument("--contestants", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--resend-fraction",
        type=float,
        default=DEFAULT_RESEND_FRACTION,
        help="fraction of lines that re-send an earlier vote id",
    )
    parser.add_argument(
        "--subscribers-per-area",
        type=int,
        default=DEFAULT_SUBSCRIBERS_PER_AREA,
        help=f"distinct phone numbers per area code (S-Store: {S_STORE_SUBSCRIBERS_PER_AREA})",
    )
    args = parser.parse_args(argv)
    try:
        written = write_votes_file(
            args.out,
            args.count,
            args.contestants,
            args.seed,
            resend_fraction=args.resend_fraction,
            subscribers_per_area=args.subscribers_per_area,
        )
    except (ValueError, OSError) as e:
        parser.error(str(e))
    print(f"wrote {written} votes to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
