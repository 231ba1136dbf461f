"""Leaderboard Maintenance (S-Store VLDB'15, 4.1.1) written against txstream's public API.

Three procedures form one nested transaction per batch: `validate` admits votes,
`maintain_leaderboard` feeds the trending window and counts accepted votes, and
`remove_lowest` drops the least popular contestant every `threshold` accepted votes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from leaderboard import records
from txstream import App, Record, Table, TxnContext

AREA_CODE_DIVISOR = 10**7


@dataclass(frozen=True)
class Params:
    contestants: int = 50
    threshold: int = 20000
    max_votes: int = 1
    window: int = 100
    slide: int = 10


@dataclass(frozen=True)
class Tables:
    """The app's tables, as the procedures name them."""

    contestants: Table
    area_codes: Table
    votes: Table
    votes_by_contestant: Table
    phone_votes: Table
    seen_vote_ids: Table
    stats: Table
    removed: Table
    trending: Table


def build_app(
    params: Params, name: str = "leaderboard", recovery: str = "changelog", typed: bool = False
) -> App:
    """`typed`: declare the records with the Python types of `leaderboard.records` rather
    than by their `.avsc` names (the same records, either way)."""
    app = App(name, params=asdict(params), recovery=recovery, namespace="leaderboard")

    def schema(record: str) -> str | type:
        return getattr(records, record) if typed else f"leaderboard.{record}"

    votes_in = app.stream("votes", schema=schema("Vote"), key_field="phone_number")
    accepted = app.stream("accepted_votes", schema=schema("AcceptedVote"))
    removals_due = app.stream("removals_due", schema=schema("RemovalDue"))
    contestant_rows = app.stream("contestant_rows", schema=schema("Contestant"))
    area_code_rows = app.stream("area_code_rows", schema=schema("AreaCode"))

    t = Tables(
        contestants=app.table("contestants", schema=schema("Contestant")),
        area_codes=app.table("area_codes", schema=schema("AreaCode")),
        votes=app.table("votes", schema=schema("AcceptedVote")),
        votes_by_contestant=app.table("votes_by_contestant", schema=schema("Seen")),
        phone_votes=app.table("phone_votes", schema=schema("Count")),
        seen_vote_ids=app.table("seen_vote_ids", schema=schema("Seen")),
        stats=app.table("stats", schema=schema("Count")),
        removed=app.table("removed", schema=schema("Removal")),
        trending=app.table("trending", schema=schema("Count")),
    )
    trending = app.window(
        "trending_window", schema=schema("AcceptedVote"), rows=params.window, slide=params.slide
    )

    @app.procedure(input=contestant_rows)
    def load_contestants(ctx: TxnContext, batch: Sequence[Record]) -> None:
        contestants = ctx.table(t.contestants)
        for row in batch:
            contestants.put(row["contestant_number"], row)

    @app.procedure(input=area_code_rows)
    def load_area_codes(ctx: TxnContext, batch: Sequence[Record]) -> None:
        area_codes = ctx.table(t.area_codes)
        for row in batch:
            area_codes.put(row["area_code"], row)

    @app.procedure(input=votes_in, outputs=[accepted])
    def validate(ctx: TxnContext, batch: Sequence[Record]) -> None:
        seen, contestants = ctx.table(t.seen_vote_ids), ctx.table(t.contestants)
        phones, votes = ctx.table(t.phone_votes), ctx.table(t.votes)
        for vote in batch:
            vote_id, phone = vote["vote_id"], vote["phone_number"]
            number = vote["contestant_number"]
            if seen.get(vote_id) is not None:
                _count(ctx, t, ("rejected", "duplicate_vote_id"))
                continue
            seen.put(vote_id, {})
            contestant = contestants.get(number)
            if contestant is None:
                _count(ctx, t, ("rejected", "invalid_contestant"))
                continue
            current = phones.get(phone)
            cast = 0 if current is None else current["value"]
            if cast >= params.max_votes:
                _count(ctx, t, ("rejected", "over_vote_limit"))
                continue
            area = ctx.table(t.area_codes).get(phone // AREA_CODE_DIVISOR)
            row = {**vote, "state": "XX" if area is None else area["state"]}
            votes.put(vote_id, row)
            ctx.table(t.votes_by_contestant).put((number, vote_id), {})
            phones.put(phone, {"value": cast + 1})
            contestant["num_votes"] += 1
            contestants.put(number, contestant)
            ctx.emit(accepted, row)

    @app.procedure(input=accepted, outputs=[removals_due], windows=[trending])
    def maintain_leaderboard(ctx: TxnContext, batch: Sequence[Record]) -> None:
        window = ctx.window(trending)
        for vote in batch:
            window.insert(vote)
            accepted_so_far = _count(ctx, t, ("accepted",))
            if accepted_so_far % params.threshold == 0:
                ctx.emit(removals_due, {"at_accepted": accepted_so_far})

    @app.on_slide(trending)
    def recount_trending(ctx: TxnContext) -> None:
        """EE trigger: the trending counts follow the window's visible tuples."""
        counts = Counter(ctx.window(trending).visible_column("contestant_number"))
        # A slide moves at most 2 * slide of the counts: write only those, so each slide
        # adds a few rows to the write set and the changelog, not the whole table.
        table = ctx.table(t.trending)
        for key, row in table.scan():
            n = counts.pop(int(key[0]), None)
            if n is None:
                table.delete(key)
            elif n != row["value"]:
                table.put(key, {"value": n})
        for number, n in counts.items():
            table.put(number, {"value": n})

    @app.procedure(input=removals_due)
    def remove_lowest(ctx: TxnContext, batch: Sequence[Record]) -> None:
        contestants = ctx.table(t.contestants)
        for _ in batch:
            current = [row for _, row in contestants.scan()]
            if len(current) <= 1:
                continue
            lowest = min(current, key=lambda r: (r["num_votes"], -r["contestant_number"]))
            number = lowest["contestant_number"]
            _delete_votes_of(ctx, t, number)
            contestants.delete(number)
            removed = ctx.table(t.removed)
            seq = sum(1 for _ in removed.scan()) + 1
            at = _value(ctx, t, ("accepted",))
            removed.put(seq, {**_removal(lowest), "at_accepted": at})

    app.nested("leaderboard_round", [validate, maintain_leaderboard, remove_lowest])
    return app


def _removal(row: Record) -> Record:
    return {"contestant_number": row["contestant_number"], "num_votes": row["num_votes"]}


def _delete_votes_of(ctx: TxnContext, t: Tables, number: int) -> None:
    """Return the removed contestant's votes to their voters, who may vote again."""
    votes, phones = ctx.table(t.votes), ctx.table(t.phone_votes)
    index = ctx.table(t.votes_by_contestant)
    for key, _ in index.scan(number):
        vote_id = key[1]
        vote = votes.get(vote_id)
        if vote is not None:
            phone = vote["phone_number"]
            left = phones.get(phone)
            if left is not None and left["value"] > 1:
                phones.put(phone, {"value": left["value"] - 1})
            else:
                phones.delete(phone)
            votes.delete(vote_id)
        index.delete(key)


def _value(ctx: TxnContext, t: Tables, key: tuple[str, ...]) -> int:
    row = ctx.table(t.stats).get(key)
    return 0 if row is None else int(row["value"])


def _count(ctx: TxnContext, t: Tables, key: tuple[str, ...]) -> int:
    n = _value(ctx, t, key) + 1
    ctx.table(t.stats).put(key, {"value": n})
    return n


def from_params(values: dict[str, Any]) -> App:
    """The worker's factory (`--app leaderboard.dataflow:from_params`)."""
    name = str(values.pop("name", "leaderboard"))
    recovery = str(values.pop("recovery", "changelog"))
    typed = bool(values.pop("typed", False))
    return build_app(Params(**values), name=name, recovery=recovery, typed=typed)
