"""`txstream describe --app module:factory`: the dataflow as a graph, with its topics.

Text for people; Mermaid or Graphviz to draw it. Everything comes from the App's
declarations and the topic naming (`AppTopics`), so no broker is needed.
"""

from __future__ import annotations

import json
from enum import StrEnum

import typer

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Procedure
from txstream.model.windows import TimeWindowSpec, TupleWindowSpec
from txstream.schemas import ddl
from txstream.schemas.ddl import UnmappableSchema
from txstream.schemas.registry import SchemaError, SchemaRegistry, to_avsc


class Format(StrEnum):
    TEXT = "text"
    MERMAID = "mermaid"
    DOT = "dot"
    WAREHOUSE = "warehouse"
    AVRO = "avro"


def describe(
    app_spec: str = typer.Option(..., "--app", help="module:factory (or module:app)"),
    params: str = typer.Option("{}", help="JSON object passed to the factory"),
    fmt: Format = typer.Option(
        Format.TEXT,
        "--format",
        help="text, mermaid, dot, warehouse (the ETL's TOML file), or avro (each stream's, "
        "table's and window's record schema)",
    ),
) -> None:
    """Show an app's dataflow: procedures in graph order, streams, windows, tables, nested
    and OLTP transactions, and the Kafka topic behind each; or, as `warehouse`, the file
    `txstream etl run --config` loads it by, made from the declarations alone; or, as
    `avro`, the record schema of each stream, table and window, derived or from its file."""
    application = app_or_exit(app_spec, params)
    settings = Settings()
    if fmt in (Format.WAREHOUSE, Format.AVRO):
        made = warehouse if fmt is Format.WAREHOUSE else avro
        try:
            typer.echo(made(application, application.schema_registry(settings.schema_dir)))
        except (SchemaError, UnmappableSchema) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        return
    render = {Format.TEXT: text, Format.MERMAID: mermaid, Format.DOT: dot}[fmt]
    typer.echo(render(application, settings.kafka_partitions))


def text(app: App, partitions: int) -> str:
    df, topics = app.dataflow(), AppTopics(app.name)
    decl = df.decl
    lines = [f"app {app.name} (recovery: {app.recovery.value})", "", "streams:"]
    borders = set(df.border_streams)
    for s in decl.streams.values():
        role = "input from outside" if s.name in borders else _made_by(df, s.name)
        readers = ", ".join(p.name for p in df.consumers.get(s.name, ())) or "no procedure"
        lines.append(
            f"  {s.name} [{s.schema}]: topic {topics.stream(s.name)} (partitions: {partitions});"
            f" {role}; read by {readers}"
        )
    lines += ["", "procedures, in graph order:"]
    for name in df.order:
        p = decl.procedures[name]
        outs = ", ".join(p.outputs) or "nothing"
        owned = f"; owns window {', '.join(p.windows)}" if p.windows else ""
        nested = df.nested_of.get(name)
        member = f"; in nested transaction {nested.name}" if nested else ""
        lines.append(f"  {name}: {p.input} -> {outs}{owned}{member}{_placement(p, topics)}")
    if decl.windows:
        lines += ["", "windows:"]
        owners = {w: p.name for p in decl.procedures.values() for w in p.windows}
        for w in decl.windows.values():
            owner = owners.get(w.name, "no procedure")
            lines.append(f"  {w.name} [{w.schema}]: {_spec(w.spec)}, owned by {owner}")
    lines += ["", f"tables (state in topic {topics.changelog} or {topics.command_log}):"]
    lines += [f"  {t.name} [{t.schema}]" for t in decl.tables.values()] or ["  none"]
    if decl.nested:
        lines += ["", "nested transactions:"]
        lines += [f"  {n.name}: {' -> '.join(n.procedures)}" for n in decl.nested.values()]
    if decl.transactions:
        lines += ["", f"OLTP transactions (requests on {topics.oltp_in}):"]
        lines += [f"  {t}" for t in decl.transactions]
    lines += [
        "",
        f"system topics: {topics.commits} (commit notices), {topics.aborts} (dead letters)",
    ]
    return "\n".join(lines)


def avro(app: App, registry: SchemaRegistry) -> str:
    """One JSON document: each stream's, table's and window's record schema as `.avsc`
    JSON, under its kind and name, with where it comes from (a file, or a Python type)."""
    decl = app.decl
    out: dict[str, dict[str, object]] = {}
    for kind, group in (("streams", decl.streams), ("tables", decl.tables),
                        ("windows", decl.windows)):  # fmt: skip
        out[kind] = {
            item.name: {
                "from": str(registry.origin(item.schema)),
                "schema": to_avsc(registry.get(item.schema)),
            }
            for item in group.values()
        }
    return json.dumps(out, indent=2)


def warehouse(app: App, registry: SchemaRegistry) -> str:
    """The app's warehouse as `txstream etl run --config` reads it: each stream a fact
    table (one row per tuple; a spanning stream's batches, on several partitions, loaded
    once), each table a mirror (followed through the changelog), their
    columns from the Avro schemas. A table's key parts are columns by the names its
    declaration gives (`app.table(..., key=...)`), else one `key` column of text."""
    dataflow = app.dataflow()
    decl, spanning = dataflow.decl, set(dataflow.spanning_streams)
    out = [
        f"# The warehouse of app {app.name!r}, from its declarations alone:",
        f"#   txstream describe --app ... --format warehouse > {app.name}.toml",
        "# Edit freely (rules, dimensions, snapshots: see apps/leaderboard/warehouse.toml).",
    ]
    for s in decl.streams.values():
        name = f"{s.name}_stream" if s.name in decl.tables else s.name
        cols, rename = _unreserved(ddl.columns(registry.get(s.schema)), "tuple_")
        out += ["", "[[fact]]", f"table = {_toml(name)}", f"stream = {_toml(s.name)}",
                f"schema = {_toml(s.schema)}", f"columns = {_toml(ddl.column_list(cols))}",
                *rename]  # fmt: skip
        if s.name in spanning:  # a batch on several partitions: one copy is the fact
            out.append("broadcast = true")
    for t in decl.tables.values():
        key = [(k, ddl.PRIMITIVES[avro]) for k, avro in t.key] or [("key", "STRING")]
        key = [(f"key_{k}" if k in ddl.RESERVED else k, sql) for k, sql in key]
        named = {k for k, _ in key}
        row = [(n, sql) for n, sql in ddl.columns(registry.get(t.schema)) if n not in named]
        cols, rename = _unreserved(row, "row_")
        out += ["", "[[mirror]]", f"table = {_toml(t.name)}", f"schema = {_toml(t.schema)}",
                f"columns = {_toml(ddl.column_list(key + cols))}",
                f"key = [{', '.join(_toml(k) for k, _ in key)}]", *rename]  # fmt: skip
    return "\n".join(out)


def _unreserved(
    cols: list[tuple[str, str]], prefix: str
) -> tuple[list[tuple[str, str]], list[str]]:
    """The columns, a field named like a bookkeeping column loaded as `prefix` + its name;
    and the file's `rename` line saying so, if any."""
    renames = {n: prefix + n for n, _ in cols if n in ddl.RESERVED}
    out = [(renames.get(n, n), sql) for n, sql in cols]
    if not renames:
        return out, []
    pairs = ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in renames.items())
    return out, [f"rename = {{ {pairs} }}"]


def _toml(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def _placement(p: Procedure, topics: AppTopics) -> str:
    """Where a procedure runs, when not simply on the engine that has its input."""
    if p.spanning:
        return "; spans partitions (touches=): its input reaches every engine"
    if p.partition_by is None:
        return ""
    by = p.partition_by if isinstance(p.partition_by, str) else "a function"
    order = "in batch-id order" if p.ordered else "as they arrive"
    return f"; repartitioned by {by} through topic {topics.hop(p.name)}, parts run {order}"


def mermaid(app: App, partitions: int) -> str:
    df, topics = app.dataflow(), AppTopics(app.name)
    lines = ["flowchart LR"]
    for s in df.decl.streams.values():
        lines.append(f'  s_{_id(s.name)}(["{s.name}<br/>{topics.stream(s.name)} x{partitions}"])')
    for name in df.order:
        p = df.decl.procedures[name]
        lines.append(f'  p_{_id(name)}["{name}"]')
        lines.append(f"  s_{_id(p.input)} --> p_{_id(name)}")
        lines += [f"  p_{_id(name)} --> s_{_id(out)}" for out in p.outputs]
        for w in p.windows:
            lines.append(f'  w_{_id(w)}[("{w}: {_spec(df.decl.windows[w].spec)}")]')
            lines.append(f"  p_{_id(name)} -.- w_{_id(w)}")
    return "\n".join(lines)


def dot(app: App, partitions: int) -> str:
    df, topics = app.dataflow(), AppTopics(app.name)
    lines = [f'digraph "{app.name}" {{', "  rankdir=LR;"]
    for s in df.decl.streams.values():
        label = f"{s.name}\\n{topics.stream(s.name)} x{partitions}"
        lines.append(f'  "s:{s.name}" [shape=ellipse, label="{label}"];')
    for name in df.order:
        p = df.decl.procedures[name]
        lines.append(f'  "p:{name}" [shape=box, label="{name}"];')
        lines.append(f'  "s:{p.input}" -> "p:{name}";')
        lines += [f'  "p:{name}" -> "s:{out}";' for out in p.outputs]
        for w in p.windows:
            label = f"{w}\\n{_spec(df.decl.windows[w].spec)}"
            lines.append(f'  "w:{w}" [shape=cylinder, label="{label}"];')
            lines.append(f'  "p:{name}" -> "w:{w}" [style=dashed, arrowhead=none];')
    lines.append("}")
    return "\n".join(lines)


def _made_by(df: Dataflow, stream: str) -> str:
    producer = df.producers.get(stream)
    return f"made by {producer}" if producer else "made by no procedure"


def _spec(spec: TupleWindowSpec | TimeWindowSpec) -> str:
    if isinstance(spec, TupleWindowSpec):
        return f"ROWS {spec.rows} SLIDE {spec.slide}"
    return f"RANGE {spec.range} SLIDE {spec.slide} ON {spec.time_field}"


def _id(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
