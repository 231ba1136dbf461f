"""The tables, windows and streams a procedure's body names by a literal string, checked
against the app's declarations when its dataflow is built.

A typo in `ctx.table("veiws")` would otherwise surface only when that line first runs, on a
live worker, as an aborted batch. Here it is reported before anything runs, naming the
procedure, the line, the name and the closest declared one. Only what the source shows is
seen: a name computed at run time, or used in a helper the procedure calls, is not, and the
engine still refuses it when it runs.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from txstream.model.declarations import Declarations

# The context's methods that take a declared name first.
METHODS = ("table", "window", "emit")


@dataclass(frozen=True)
class Use:
    method: str  # table | window | emit
    name: str
    line: int  # in the procedure's source file


@cache
def uses(fn: Callable[..., Any]) -> tuple[Use, ...]:
    """Each `ctx.<method>("<name>", ...)` in `fn`'s body, `ctx` its first parameter; none if
    its source cannot be had (built in the REPL, or a callable object)."""
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return ()
    func = tree.body[0] if tree.body else None
    if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or not func.args.args:
        return ()
    ctx = func.args.args[0].arg
    found = []
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in METHODS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == ctx
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(Use(node.func.attr, node.args[0].value, first + node.lineno - 1))
    return tuple(sorted(found, key=lambda u: u.line))


def problems(decl: Declarations) -> list[str]:
    """Every literal name a procedure or transaction uses that it may not: an undeclared
    table, a window it does not own, a stream that is not one of its outputs."""
    out = []
    for proc in decl.procedures.values():
        for use in uses(proc.fn):
            allowed = {"table": decl.tables, "window": proc.windows, "emit": proc.outputs}
            why = _refusal(use, allowed[use.method], decl)
            if why is not None:
                out.append(f"procedure {proc.name!r}{_at(proc.fn, use)}: {why}")
    for txn in decl.transactions.values():
        for use in uses(txn.fn):
            allowed = {"table": decl.tables, "window": (), "emit": ()}
            why = _refusal(use, allowed[use.method], decl)
            if why is not None:
                out.append(f"transaction {txn.name!r}{_at(txn.fn, use)}: {why}")
    return out


def _refusal(use: Use, allowed: Iterable[str], decl: Declarations) -> str | None:
    allowed = list(allowed)
    if use.name in allowed:
        return None
    if use.method == "table":
        what = f"table {use.name!r}, which the app does not declare"
    elif use.name in decl.windows:
        what = (f"window {use.name!r}, which it does not own (a window is visible only to "
                "the procedure that declares it)")  # fmt: skip
    elif use.method == "window":
        what = f"window {use.name!r}, which the app does not declare"
    else:
        what = f"emits to {use.name!r}, which is not one of its outputs"
    close = difflib.get_close_matches(use.name, allowed, n=1, cutoff=0.6)
    if close:
        return f"{what}; did you mean {close[0]!r}?"
    return f"{what}; it may use {sorted(allowed)}" if allowed else f"{what}; it may use none"


def _at(fn: Callable[..., Any], use: Use) -> str:
    path = inspect.getsourcefile(fn) or "?"
    return f" ({path.rsplit('/', 1)[-1]}:{use.line})"
