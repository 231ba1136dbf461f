"""The hot path's modules compiled to C by mypyc, and the guard that keeps a stale build
from running.

The worker spends its core in these modules' Python (the engine's write sets, views and
TEs, the committed state's caches, the Avro writers): mypyc compiles them, as they are,
from their type hints. `make native` builds them in place, an extension module beside
each source file, and records each source's hash in `native.json`.

Python imports an extension module in preference to the source beside it, so a build left
behind after a source changed would run old code. `install` runs before any of them is
imported, as the build's venv starts each interpreter (a `.pth` file `make native` writes;
`import txstream` itself has no side effect): unless every recorded hash matches its
source, all of them load from source. All or none, since compiled modules call into each
other directly. TXSTREAM_NATIVE=0 asks for the sources too.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, SourceFileLoader
from pathlib import Path
from types import ModuleType

MODULES = (
    "txstream.commit.record_limit",
    "txstream.engine.context",
    "txstream.engine.executor",
    "txstream.engine.group",
    "txstream.engine.ledger",
    "txstream.engine.partition_engine",
    "txstream.engine.rows",
    "txstream.engine.windows",
    "txstream.engine.writeset",
    "txstream.schemas.codec",
    "txstream.schemas.readers",
    "txstream.schemas.writers",
    "txstream.state.codec",
    "txstream.state.committed",
    "txstream.state.keys",
)
# mypyc's shared library for the group: txstream/native_lib__mypyc.*.so
GROUP = "txstream.native_lib"
PACKAGE_DIR = Path(__file__).parent
STAMP = PACKAGE_DIR / "native.json"
ENV = "TXSTREAM_NATIVE"


def source(module: str) -> Path:
    return PACKAGE_DIR.parent.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes() -> dict[str, str]:
    return {m: hashlib.sha256(source(m).read_bytes()).hexdigest() for m in MODULES}


def built() -> list[Path]:
    """The extension modules of a build now beside the sources."""
    return [p for m in MODULES for p in source(m).parent.glob(f"{m.rsplit('.', 1)[1]}.*.so")]


def problem() -> str | None:
    """Why the build beside the sources cannot run, or None if it is current."""
    if not built():
        return "no build"
    try:
        recorded = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return "the build has no stamp"
    stale = sorted(m for m, h in source_hashes().items() if recorded.get(m) != h)
    return f"the build is older than {', '.join(stale)}" if stale else None


def status() -> str:
    """Whether the compiled modules run, and if not why: for logs and benchmark reports."""
    if os.environ.get(ENV) == "0":
        return f"interpreted ({ENV}=0)"
    why = problem()
    return f"compiled ({len(MODULES)} modules, mypyc)" if why is None else f"interpreted ({why})"


def install() -> None:
    """Load MODULES from source unless the build beside them is current."""
    if built() and (os.environ.get(ENV) == "0" or problem() is not None):
        sys.meta_path.insert(0, _FromSource(MODULES))


class _FromSource(MetaPathFinder):
    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.modules:
            return None
        origin = str(source(fullname))
        spec = ModuleSpec(fullname, SourceFileLoader(fullname, origin), origin=origin)
        spec.has_location = True
        return spec
