"""A procedure's literal names checked against the declarations when the dataflow is built
(`model.names`): a typo is reported before any worker runs, naming the procedure, its
line, the name and the closest declared one."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from txstream import App, DataflowError, Record, TxnContext
from txstream.cli.main import app as cli

HERE = Path(__file__).name


def clicks() -> App:
    app = App("clicks")
    clicks = app.stream("clicks", schema="x.Click")
    views = app.stream("page_views", schema="x.View")
    app.table("views", schema="x.Views", key=("page",))
    app.window("recent", schema="x.Click", rows=10, slide=1)
    assert clicks.name and views.name
    return app


def test_a_typo_in_a_table_name_names_the_procedure_the_line_and_the_closest_table() -> None:
    app = clicks()

    @app.procedure(input="clicks", outputs=["page_views"])
    def count(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for click in batch:
            ctx.table("veiws").add(click["page"], {"n": 1})

    with pytest.raises(DataflowError) as e:
        app.dataflow()
    line = count.__code__.co_firstlineno + 3
    assert str(e.value) == (
        f"procedure 'count' ({HERE}:{line}): table 'veiws', which the app does not declare; "
        "did you mean 'views'?"
    )


def test_a_window_it_does_not_own_and_a_stream_it_does_not_emit_to_are_named_too() -> None:
    app = clicks()

    @app.procedure(input="clicks", outputs=["page_views"], windows=["recent"])
    def keep(ctx: TxnContext, batch: Sequence[Record]) -> None:
        ctx.window("recent")
        ctx.emit("page_veiws", {})

    @app.procedure(input="page_views")
    def peek(ctx: TxnContext, batch: Sequence[Record]) -> None:
        ctx.window("recent")

    with pytest.raises(DataflowError) as e:
        app.dataflow()
    problems = str(e.value).split("; ")
    assert "emits to 'page_veiws', which is not one of its outputs" in problems[0]
    assert problems[1] == "did you mean 'page_views'?"
    assert problems[2].startswith("procedure 'peek'")
    assert "window 'recent', which it does not own" in problems[2]


def test_a_transaction_s_typo_is_named_and_a_name_made_at_run_time_is_not_seen() -> None:
    app = clicks()

    @app.procedure(input="clicks")
    def dynamic(ctx: TxnContext, batch: Sequence[Record]) -> None:
        ctx.table(batch[0]["table"])  # seen only when it runs

    app.dataflow()  # nothing to say about it

    @app.transaction()
    def reset(ctx: TxnContext, params: Record) -> None:
        ctx.table("view").put(params["page"], {"n": 0})

    with pytest.raises(DataflowError, match=r"transaction 'reset' .*did you mean 'views'\?"):
        app.dataflow()


def test_describe_reports_the_typo_before_any_worker_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "typo_app.py").write_text(
        "from txstream import App\n\n"
        "def build(params):\n"
        "    app = App('typo')\n"
        "    app.stream('clicks', schema='x.Click')\n"
        "    app.table('views', schema='x.Views', key=('page',))\n\n"
        "    @app.procedure(input='clicks')\n"
        "    def count(ctx, batch):\n"
        "        ctx.table('veiws')\n\n"
        "    return app\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    said = CliRunner().invoke(cli, ["describe", "--app", "typo_app:build"])
    assert said.exit_code != 0
    assert "procedure 'count' (typo_app.py:10): table 'veiws'" in said.output
    assert "did you mean 'views'?" in said.output
    sys.modules.pop("typo_app", None)
