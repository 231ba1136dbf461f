"""`txstream describe --app module:factory`: the dataflow as a graph, with its topics.

Text for people; Mermaid or Graphviz to draw it. Everything comes from the App's
declarations and the topic naming (`AppTopics`), so no broker is needed.
"""

from __future__ import annotations

import json
from enum import StrEnum

import typer

from txstream.config import Settings
from txstream.kafka.topics import AppTopics
from txstream.model.app import App, AppLoadError, load_app
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Procedure
from txstream.model.windows import TimeWindowSpec, TupleWindowSpec


class Format(StrEnum):
    TEXT = "text"
    MERMAID = "mermaid"
    DOT = "dot"


def describe(
    app_spec: str = typer.Option(..., "--app", help="module:factory (or module:app)"),
    params: str = typer.Option("{}", help="JSON object passed to the factory"),
    fmt: Format = typer.Option(Format.TEXT, "--format", help="text, mermaid or dot"),
) -> None:
    """Show an app's dataflow: procedures in graph order, streams, windows, tables, nested
    and OLTP transactions, and the Kafka topic behind each."""
    try:
        application = load_app(app_spec, json.loads(params))
    except json.JSONDecodeError as e:
        typer.echo(f"error: --params is not JSON: {e}", err=True)
        raise typer.Exit(2) from None
    except AppLoadError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    render = {Format.TEXT: text, Format.MERMAID: mermaid, Format.DOT: dot}[fmt]
    typer.echo(render(application, Settings().kafka_partitions))


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
