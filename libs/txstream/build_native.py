"""Compile the hot path's modules (`txstream.native.MODULES`) with mypyc, in place.

    .venv/bin/python libs/txstream/build_native.py          # `make native` runs this

Does nothing while the build beside the sources matches them. Otherwise mypyc type-checks
the modules with the project's mypy settings (pyproject.toml), generates C, and gcc builds
one extension module per source plus the group's shared library; C sources and objects go
under build/native. The sources' hashes are written last, so a build that fails part way
is never taken for a current one. `--clean` removes a build.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "libs" / "txstream"))
os.environ["TXSTREAM_NATIVE"] = "0"  # importing txstream here must not load the old build

from txstream import native  # noqa: E402


def clean() -> None:
    shared = native.GROUP.rsplit(".", 1)[1] + "__mypyc"  # mypyc's name for the group's library
    for path in [*native.built(), *native.PACKAGE_DIR.glob(f"{shared}.*.so")]:
        path.unlink()
    native.STAMP.unlink(missing_ok=True)


def build() -> None:
    # Imported here: mypyc and setuptools are build tools, not the runtime's dependencies.
    from mypyc.build import mypycify
    from setuptools import setup

    # setup() reads the project's pyproject.toml, which says nothing of this build
    warnings.filterwarnings("ignore", module="setuptools.config")

    os.chdir(ROOT)  # mypy reads pyproject.toml's settings from here
    native.STAMP.unlink(missing_ok=True)
    paths = [str(native.source(m).relative_to(ROOT)) for m in native.MODULES]
    started = time.monotonic()
    print(f"compiling {len(paths)} modules with mypyc (about a minute)", flush=True)
    extensions = mypycify(paths, group_name=native.GROUP, target_dir="build/native/c")
    setup(
        name="txstream-native",
        ext_modules=extensions,
        script_args=["-q", "build_ext", "--inplace", "--build-temp", "build/native/obj"],
        package_dir={"": "libs/txstream"},
    )
    native.STAMP.write_text(json.dumps(native.source_hashes(), indent=1) + "\n")
    why = native.problem()
    if why is not None:
        raise SystemExit(f"the build does not match the sources: {why}")
    print(f"compiled {len(paths)} modules in {time.monotonic() - started:.0f} s")


def guard() -> None:
    """Have every interpreter of this venv run `native.install` as it starts (a `.pth`
    line), so a build older than its sources never runs; `import txstream` itself then
    changes nothing. The line loads native.py by path, not the package, to stay cheap."""
    site = Path(sysconfig.get_paths()["purelib"])
    path = str(native.source("txstream.native"))
    line = (
        "import importlib.util as u; "
        f"s = u.spec_from_file_location('txstream_native_guard', {path!r}); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); m.install()\n"
    )
    (site / "txstream_native_guard.pth").write_text(line)


def main() -> None:
    if "--clean" in sys.argv[1:]:
        clean()
    elif native.problem() is not None:
        build()
    guard()


if __name__ == "__main__":
    main()
