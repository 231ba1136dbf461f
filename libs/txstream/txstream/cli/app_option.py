"""The App a command's `--app` (and `--params`) name, or one line on stderr and exit 2."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import typer

from txstream.model.app import App, AppLoadError, load_app


def app_or_exit(spec: str, params: str | Mapping[str, Any] = "{}") -> App:
    """`load_app(spec, params)`, `params` given as `--params`' JSON text or as values; a
    mistake in either is told in one line, and the command exits with status 2."""
    try:
        values = json.loads(params) if isinstance(params, str) else params
    except json.JSONDecodeError as e:
        typer.echo(f"error: --params is not JSON: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        return load_app(spec, values)
    except AppLoadError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
