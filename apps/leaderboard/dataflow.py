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
from txstream import App, Record, TxnContext

AREA_CODE_DIVISOR = 10**7


@dataclass(frozen=True)
class Params:
    contestants: int = 50
    threshold: int = 20000
    max_votes: int = 1
    window: int = 100
    slide: int = 10


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

    app.table("contestants", schema=schema("Contestant"))
    app.table("area_codes", schema=schema("AreaCode"))
    app.table("votes", schema=schema("AcceptedVote"))
    app.table("votes_by_contestant", schema=schema("Seen"))
    app.table("phone_votes", schema=schema("Count"))
    app.table("seen_vote_ids", schema=schema("Seen"))
    app.table("stats", schema=schema("Count"))
    app.table("removed", schema=schema("Removal"))
    app.table("trending", schema=schema("Count"))
    trending = app.window(
        "trending_window", schema=schema("AcceptedVote"), rows=params.window, slide=params.slide
    )

    @app.procedure(input=contestant_rows)
    def load_contestants(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for row in batch:
            ctx.table("contestants").put(row["contestant_number"], row)

    @app.procedure(input=area_code_rows)
    def load_area_codes(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for row in batch:
            ctx.table("area_codes").put(row["area_code"], row)

    @app.procedure(input=votes_in, outputs=[accepted])
    def validate(ctx: TxnContext, batch: Sequence[Record]) -> None:
        seen, contestants = ctx.table("seen_vote_ids"), ctx.table("contestants")
        phones, votes = ctx.table("phone_votes"), ctx.table("votes")
        for vote in batch:
            vote_id, phone = vote["vote_id"], vote["phone_number"]
            number = vote["contestant_number"]
            if seen.get(vote_id) is not None:
                _count(ctx, ("rejected", "duplicate_vote_id"))
                continue
            seen.put(vote_id, {})
            contestant = contestants.get(number)
            if contestant is None:
                _count(ctx, ("rejected", "invalid_contestant"))
                continue
            current = phones.get(phone)
            cast = 0 if current is None else current["value"]
            if cast >= ctx.params["max_votes"]:
                _count(ctx, ("rejected", "over_vote_limit"))
                continue
            area = ctx.table("area_codes").get(phone // AREA_CODE_DIVISOR)
            row = {**vote, "state": "XX" if area is None else area["state"]}
            votes.put(vote_id, row)
            ctx.table("votes_by_contestant").put((number, vote_id), {})
            phones.put(phone, {"value": cast + 1})
            contestant["num_votes"] += 1
            contestants.put(number, contestant)
            ctx.emit("accepted_votes", row)

    @app.procedure(input=accepted, outputs=[removals_due], windows=[trending])
    def maintain_leaderboard(ctx: TxnContext, batch: Sequence[Record]) -> None:
        window = ctx.window("trending_window")
        for vote in batch:
            window.insert(vote)
            accepted_so_far = _count(ctx, ("accepted",))
            if accepted_so_far % ctx.params["threshold"] == 0:
                ctx.emit("removals_due", {"at_accepted": accepted_so_far})

    @app.on_slide(trending)
    def recount_trending(ctx: TxnContext) -> None:
        """EE trigger: the trending counts follow the window's visible tuples."""
        counts = Counter(ctx.window("trending_window").visible_column("contestant_number"))
        # A slide moves at most 2 * slide of the counts: write only those, so each slide
        # adds a few rows to the write set and the changelog, not the whole table.
        table = ctx.table("trending")
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
        contestants = ctx.table("contestants")
        for _ in batch:
            current = [row for _, row in contestants.scan()]
            if len(current) <= 1:
                continue
            lowest = min(current, key=lambda r: (r["num_votes"], -r["contestant_number"]))
            number = lowest["contestant_number"]
            _delete_votes_of(ctx, number)
            contestants.delete(number)
            removed = ctx.table("removed")
            seq = sum(1 for _ in removed.scan()) + 1
            at = _value(ctx, ("accepted",))
            removed.put(seq, {**_removal(lowest), "at_accepted": at})

    app.nested("leaderboard_round", [validate, maintain_leaderboard, remove_lowest])
    return app


def _removal(row: Record) -> Record:
    return {"contestant_number": row["contestant_number"], "num_votes": row["num_votes"]}


def _delete_votes_of(ctx: TxnContext, number: int) -> None:
    """Return the removed contestant's votes to their voters, who may vote again."""
    votes, phones = ctx.table("votes"), ctx.table("phone_votes")
    index = ctx.table("votes_by_contestant")
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


def _value(ctx: TxnContext, key: tuple[str, ...]) -> int:
    row = ctx.table("stats").get(key)
    return 0 if row is None else int(row["value"])


def _count(ctx: TxnContext, key: tuple[str, ...]) -> int:
    n = _value(ctx, key) + 1
    ctx.table("stats").put(key, {"value": n})
    return n


def from_params(values: dict[str, Any]) -> App:
    """The worker's factory (`--app leaderboard.dataflow:from_params`)."""
    name = str(values.pop("name", "leaderboard"))
    recovery = str(values.pop("recovery", "changelog"))
    typed = bool(values.pop("typed", False))
    return build_app(Params(**values), name=name, recovery=recovery, typed=typed)
