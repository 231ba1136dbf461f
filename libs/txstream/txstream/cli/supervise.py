"""`txstream supervise`: run one long-running service under a restarting supervisor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from txstream.config import Settings
from txstream.stack.supervisor import Policy, Supervisor

app = typer.Typer()
DEFAULT = Policy()


@app.command(context_settings={"allow_interspersed_args": False})
def supervise(
    command: Annotated[
        list[str], typer.Argument(metavar="CMD", help="The service's command line, after `--`.")
    ],
    name: Annotated[
        str, typer.Option(help="Service name: the child's pid goes to <home>/run/NAME.pid.")
    ],
    home: Annotated[
        Path | None, typer.Option(help="State directory; defaults to TXSTREAM_HOME.")
    ] = None,
    max_restarts: Annotated[
        int, typer.Option(min=0, help="Give up when the child fails more often in the window.")
    ] = DEFAULT.max_restarts,
    window_s: Annotated[
        float, typer.Option(min=0, help="Seconds over which --max-restarts counts.")
    ] = DEFAULT.window_s,
    backoff_ms: Annotated[
        int, typer.Option(min=0, help="Delay before the first restart; doubles on each one.")
    ] = DEFAULT.backoff_ms,
    backoff_max_ms: Annotated[
        int, typer.Option(min=0, help="Cap on the delay between restarts.")
    ] = DEFAULT.backoff_max_ms,
    stop_timeout_s: Annotated[
        float, typer.Option(min=0, help="On SIGTERM/SIGINT, wait this long before SIGKILL.")
    ] = DEFAULT.stop_timeout_s,
) -> None:
    """Run CMD, restarting it whenever it dies other than by exiting 0.

    Child output: <home>/log/NAME.log. Restarts: <home>/log/NAME.supervisor.log.

    SIGTERM or SIGINT stops the child, then the supervisor.
    """
    settings = Settings(home=home) if home else Settings()
    policy = Policy(max_restarts, window_s, backoff_ms, backoff_max_ms, stop_timeout_s)
    try:
        supervisor = Supervisor(name, command, settings, policy)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--name") from e
    raise typer.Exit(supervisor.run())
