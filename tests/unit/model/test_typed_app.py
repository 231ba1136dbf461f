"""An app declared with Python record types and used through its handles: schemas derived
and checked on the real engine, the handles `app.stream/table/window` return taken by a
procedure's context, and mistakes named at declaration."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import pytest

from txstream import App, DataflowError, Record, TxnContext
from txstream.config import default_schema_dir
from txstream.testing import AppTester


class Click(TypedDict):
    user: str
    page: str


class PageViews(TypedDict):
    page: str
    views: int


def clicks_app() -> App:
    app = App("typed-clicks")
    clicks = app.stream("clicks", schema=Click, key_field="user")
    page_views = app.stream("page_views", schema=PageViews)
    views = app.table("views", schema=PageViews)
    recent = app.window("recent", schema=Click, rows=2, slide=1)

    @app.procedure(input=clicks, outputs=[page_views], windows=[recent])
    def count(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for click in batch:
            ctx.window(recent).insert(click)
            row = ctx.table(views).get(click["page"]) or {"page": click["page"], "views": 0}
            row["views"] += 1
            if click["page"] == "/bad":
                ctx.table(views).put("/bad", {"page": "/bad", "views": "one"})  # off schema
                continue
            ctx.table(views).put(click["page"], row)
            ctx.emit(page_views, row)

    return app


def test_a_typed_app_runs_through_its_handles_with_its_schemas_checked() -> None:
    app = clicks_app()
    assert sorted(app.schemas) == ["typed_clicks.Click", "typed_clicks.PageViews"]
    assert app.decl.streams["clicks"].schema == "typed_clicks.Click"
    t = AppTester(app)
    t.feed("clicks", [{"user": "ann", "page": "/a"}, {"user": "bob", "page": "/a"}])
    assert t.table("views") == {("/a",): {"page": "/a", "views": 2}}
    assert [r["views"] for r in t.outputs("page_views")] == [1, 2]
    assert t.window("recent")["visible"] == [{"user": "ann", "page": "/a"},
                                             {"user": "bob", "page": "/a"}]  # fmt: skip
    t.feed("clicks", [{"user": "cy", "page": "/bad"}])
    assert [a.reason for a in t.aborts] == ["invalid_row"], "checked against PageViews"
    assert "table 'views'" in t.aborts[0].error


def test_the_registry_gives_the_derived_schema_beside_the_files() -> None:
    registry = clicks_app().schema_registry(default_schema_dir())
    parsed: Any = registry.get("typed_clicks.PageViews")
    assert [f["name"] for f in parsed["fields"]] == ["page", "views"]
    assert "derived from a Python type" in str(registry.origin("typed_clicks.Click"))
    assert "txstream.BatchEnvelope" in registry.names(), "txstream's own are still there"


@dataclasses.dataclass
class Odd:
    pair: tuple[int, int]


def test_a_type_without_an_avro_form_is_refused_naming_the_declaration() -> None:
    app = App("odd")
    with pytest.raises(DataflowError, match=r"stream 'odds': schema .*Odd\.pair"):
        app.stream("odds", schema=Odd)


def test_a_derived_name_an_avsc_also_defines_is_refused_when_the_registry_is_built(
    tmp_path: Path,
) -> None:
    schemas = tmp_path
    (schemas / "Click.avsc").write_text(
        '{"type": "record", "name": "Click", "namespace": "typed_clicks", "fields": []}'
    )
    with pytest.raises(ValueError, match=r"redefines typed_clicks\.Click"):
        clicks_app().schema_registry(schemas)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    popular: int
    label: str = "hot"


def thresholds_app() -> App:
    app = App("typed-params", params=Thresholds)
    views = app.stream("views", schema=PageViews)
    hot = app.stream("hot", schema=PageViews)

    @app.procedure(input=views, outputs=[hot])
    def pick(ctx: TxnContext, batch: Sequence[Record]) -> None:
        limits: Thresholds = ctx.params
        for row in batch:
            if row["views"] >= limits.popular:
                ctx.emit(hot, row)

    return app


def test_typed_params_are_validated_into_their_type_and_reach_procedures() -> None:
    app = thresholds_app()
    assert app.params is None, "a field without default: unset until configured"
    app.configure({"popular": "3"})
    assert app.params == Thresholds(popular=3)
    t = AppTester(app)
    t.feed("views", [{"page": "/a", "views": 2}, {"page": "/b", "views": 5}])
    assert t.outputs("hot") == [{"page": "/b", "views": 5}]


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({}, "popular: Field required"),
        (
            {"popular": "many"},
            "popular: Input should be a valid integer, unable to parse string as an "
            "integer, got 'many'",
        ),
        ({"popular": 1, "label": 7}, "label: Input should be a valid string, got 7"),
    ],
)
def test_params_that_do_not_fit_are_refused_naming_the_field(
    values: dict[str, object], says: str
) -> None:
    with pytest.raises(DataflowError, match="params do not fit Thresholds") as e:
        thresholds_app().configure(values)
    assert says in str(e.value)


class Vote(TypedDict):
    vote_id: int
    phone_number: int
    contestant_number: int


WrongVote = TypedDict("Vote", {"vote_id": int})  # type: ignore[name-match]  # noqa: UP013


def test_a_type_may_repeat_an_avsc_as_the_same_record_and_the_file_stays_its_origin() -> None:
    app = App("leaderboard-x", namespace="leaderboard")
    app.stream("votes", schema=Vote)
    registry = app.schema_registry(default_schema_dir())
    assert str(registry.origin("leaderboard.Vote")).endswith("leaderboard/Vote.avsc")
    wrong = App("leaderboard-y", namespace="leaderboard")
    wrong.stream("votes", schema=WrongVote)
    with pytest.raises(ValueError, match=r"redefines leaderboard\.Vote, .*differently"):
        wrong.schema_registry(default_schema_dir())
