"""`--app module:factory`: every mistake is one line naming it, and `txstream describe`
shows the dataflow without a broker."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from txstream.cli.main import app as cli
from txstream.model.app import App, AppLoadError, load_app
from txstream.schemas import SchemaRegistry

GOOD = """
    from txstream import App

    def build(params):
        app = App(params.get("name", "mine"))
        app.stream("clicks", schema="chain.Item")
        app.stream("counted", schema="chain.Item")
        app.table("totals", schema="chain.Item")
        app.window("recent", schema="chain.Item", rows=4, slide=2)

        @app.procedure(input="clicks", outputs=["counted"], windows=["recent"])
        def count(ctx, batch):
            pass

        return app

    def no_params():
        return build({"name": "plain"})

    instance = build({"name": "ready"})
    not_callable = 42

    def wrong_type(params):
        return "an app"

    def raises(params):
        return {}["missing"]

    def invalid(params):
        app = App("bad")
        app.stream("in", schema="chain.Item")

        @app.procedure(input="in", outputs=["nowhere"])
        def p(ctx, batch):
            pass

        return app
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "myflows.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "broken_syntax.py").write_text("def f(:\n")
    (tmp_path / "raises_on_import.py").write_text("import os\nraise RuntimeError('no config')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("spec", "name"),
    [("myflows:build", "mine"), ("myflows:no_params", "plain"), ("myflows:instance", "ready")],
)
def test_a_factory_with_or_without_params_or_an_app_itself(
    modules: Path, spec: str, name: str
) -> None:
    loaded = load_app(spec, {})
    assert isinstance(loaded, App) and loaded.name == name


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("myflows", "expected 'module:factory'"),
        ("nosuchmodule:build", "no module named 'nosuchmodule'"),
        ("broken_syntax:f", "importing broken_syntax failed: SyntaxError"),
        ("raises_on_import:x", "importing raises_on_import failed: RuntimeError: no config"),
        ("myflows:nope", "module myflows has no attribute 'nope'"),
        ("myflows:not_callable", "is a int, neither an App nor a factory"),
        ("myflows:wrong_type", "returned str, not a txstream.App"),
        ("myflows:raises", "the factory raised KeyError: 'missing'"),
        ("myflows:invalid", "the dataflow is invalid"),
    ],
)
def test_every_mistake_is_one_line_naming_it(modules: Path, spec: str, says: str) -> None:
    with pytest.raises(AppLoadError) as e:
        load_app(spec, {})
    message = str(e.value)
    assert says in message
    assert "\n" not in message
    assert message.startswith(f"--app {spec!r}")


def test_describe_shows_the_dataflow_and_its_topics(modules: Path) -> None:
    result = CliRunner().invoke(cli, ["describe", "--app", "myflows:build"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "app mine (recovery: changelog)" in out
    assert "clicks [chain.Item]: topic mine.clicks" in out
    assert "input from outside; read by count" in out
    assert "count: clicks -> counted; owns window recent" in out
    assert "recent [chain.Item]: ROWS 4 SLIDE 2, owned by count" in out
    assert "totals [chain.Item]" in out


def test_describe_says_where_cross_partition_procedures_run() -> None:
    result = CliRunner().invoke(cli, ["describe", "--app", "orders.sales:from_params"])
    assert result.exit_code == 0, result.output
    assert (
        "tally: accepted_orders -> item_totals; repartitioned by item through topic "
        "sales.hop.tally, parts run in batch-id order"
    ) in result.output
    spanning = CliRunner().invoke(cli, ["describe", "--app", "orders.dataflow:from_params"])
    assert "shop: events -> order_outcomes; spans partitions (touches=)" in spanning.output


@pytest.mark.parametrize(("fmt", "first"), [("mermaid", "flowchart LR"), ("dot", 'digraph "mine"')])
def test_describe_draws_the_graph(modules: Path, fmt: str, first: str) -> None:
    result = CliRunner().invoke(cli, ["describe", "--app", "myflows:build", "--format", fmt])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(first)
    assert any("clicks" in line and "count" in line for line in lines)  # the input edge


@pytest.mark.parametrize("spec", ["myflows:raises", "nosuchmodule:x", "broken_syntax:f"])
def test_describe_fails_in_one_line_with_exit_2(modules: Path, spec: str) -> None:
    result = CliRunner().invoke(cli, ["describe", "--app", spec])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0, result.output
    assert result.output.startswith(f"error: --app {spec!r}")
    assert "Traceback" not in result.output


def test_topics_ensure_names_a_bad_app_in_one_line(modules: Path) -> None:
    result = CliRunner().invoke(cli, ["topics", "ensure", "--app", "myflows:raises"])
    assert result.exit_code == 2
    assert "the factory raised KeyError" in result.output
    assert "Traceback" not in result.output


TYPED = """
    from typing import TypedDict

    from txstream import App


    class Click(TypedDict):
        user: str
        page: str | None


    app = App("typed")
    clicks = app.stream("clicks", schema=Click)
    app.table("last", schema="chain.Item")
"""


def test_an_app_module_in_the_working_directory_loads_and_describe_shows_its_schemas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No PYTHONPATH: `--app module:app` finds a module in the working directory, as
    `python -m` would; `--format avro` shows the derived schema and a file's."""
    (tmp_path / "typedflow.py").write_text(textwrap.dedent(TYPED))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["describe", "--app", "typedflow:app", "--format", "avro"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    click = shown["streams"]["clicks"]
    assert "derived from a Python type" in click["from"]
    assert click["schema"]["fields"] == [
        {"name": "user", "type": "string"},
        {"name": "page", "type": ["null", "string"], "default": None},
    ]
    assert shown["tables"]["last"]["from"].endswith("Item.avsc")


PARAMS = """
    from dataclasses import dataclass

    from txstream import App


    @dataclass
    class Limits:
        popular: int


    app = App("limited", params=Limits)
    app.stream("clicks", schema="chain.Item")
"""


def test_a_module_app_with_typed_params_takes_them_from_params(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "limitedflow.py").write_text(textwrap.dedent(PARAMS))
    monkeypatch.chdir(tmp_path)
    loaded = load_app("limitedflow:app", {"popular": 4})
    assert loaded.params.popular == 4
    with pytest.raises(AppLoadError, match=r"--params: .*popular: Input should be a valid"):
        load_app("limitedflow:app", {"popular": "x"})
    result = CliRunner().invoke(cli, ["describe", "--app", "limitedflow:app"])
    assert result.exit_code == 2
    assert "--params: app 'limited': params do not fit Limits: popular: Field required" in (
        result.output
    )


def test_schemas_export_writes_the_derived_schemas_a_registry_then_reads_as_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "typedflow.py").write_text(textwrap.dedent(TYPED))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "exported"
    result = CliRunner().invoke(
        cli, ["schemas", "export", "--app", "typedflow:app", "--to", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert (out / "typed" / "Click.avsc").is_file()
    registry = SchemaRegistry(out)  # as the warehouse job or the sequencer would read them
    click: Any = registry.get("typed.Click")
    assert [f["name"] for f in click["fields"]] == ["user", "page"]
    loaded = load_app("typedflow:app", {})
    assert str(loaded.schema_registry(out).origin("typed.Click")).endswith("Click.avsc")
