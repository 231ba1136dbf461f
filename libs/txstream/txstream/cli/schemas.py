"""`txstream schemas list|check|export`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.schemas import SchemaError, SchemaRegistry, check_compatibility, load_avsc

app = typer.Typer(help="Inspect Avro schemas and check schema evolution.", no_args_is_help=True)
out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


@app.command("list")
def list_schemas() -> None:
    """Every named type in the schema directory, and txstream's own, with the file that
    defines it."""
    try:
        registry = SchemaRegistry(Settings().schema_dir)
    except SchemaError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from e
    for name in registry.names():
        out.print(f"{name}  {registry.origin(name)}", markup=False)


@app.command()
def export(
    app_spec: Annotated[str, typer.Option("--app", help="module:app whose record types to export")],
    to: Annotated[Path, typer.Option("--to", file_okay=False, help="Directory to write into.")],
) -> None:
    """Write the schemas an app derives from its Python record types as `.avsc` files
    (`<dir>/<namespace>/<Name>.avsc`), for tools that read a schema directory: the
    warehouse job and the sequencer's routes. The app keeps working beside them."""
    application = app_or_exit(app_spec)
    for fullname, schema in application.schemas.items():
        namespace, _, name = fullname.rpartition(".")
        path = to / namespace / f"{name}.avsc"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(schema, indent=1) + "\n")
        out.print(f"{fullname}  {path}", markup=False)


@app.command()
def check(
    old: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Writer schema.")],
    new: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Reader schema.")],
) -> None:
    """Can data written with OLD be read with NEW? Exit 0 if so, 1 if not, 2 on a bad schema.

    Named types the files use but do not define come from the schema directory.
    """
    schema_dir = Settings().schema_dir
    try:
        registry = SchemaRegistry(schema_dir) if schema_dir.is_dir() else None
        result = check_compatibility(load_avsc(new, registry), load_avsc(old, registry))
    except SchemaError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from e
    if result.compatible:
        out.print(f"compatible: data written with {old} can be read with {new}", markup=False)
        return
    out.print(f"incompatible: data written with {old} cannot be read with {new}", markup=False)
    for message in result.messages:
        out.print(f"  - {message}", markup=False)
    raise typer.Exit(1)
