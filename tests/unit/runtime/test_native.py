"""The compiled hot path runs only while its build matches the sources (txstream.native)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from txstream import native


def _loaded_from(env: dict[str, str]) -> str:
    code = "import txstream.engine.writeset as w; print(w.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_txstream_native_0_loads_the_sources() -> None:
    assert _loaded_from({native.ENV: "0"}).endswith("engine/writeset.py")


@pytest.mark.skipif(not native.built(), reason="no build beside the sources (make native)")
def test_a_current_build_is_what_runs() -> None:
    assert native.problem() is None, f"{native.problem()}: make native"
    assert native.status().startswith("compiled")
    assert _loaded_from({native.ENV: "1"}).endswith(".so")


def test_ci_runs_the_compiled_hot_path() -> None:
    """`make test` builds it first: CI must test what `make demo` and the benchmarks run."""
    if os.environ.get("CI") != "true":
        pytest.skip("checked in CI, which runs `make test`")
    assert native.problem() is None


def test_a_changed_source_is_named_and_every_module_loads_from_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    changed = native.MODULES[3]
    stamp = tmp_path / "native.json"
    monkeypatch.setattr(native, "built", lambda: [native.source(changed)])
    monkeypatch.setattr(native, "STAMP", stamp)
    assert native.problem() == "the build has no stamp"
    stamp.write_text(json.dumps({**native.source_hashes(), changed: "0" * 64}))
    assert native.problem() == f"the build is older than {changed}"
    assert native.status() == f"interpreted (the build is older than {changed})"
    before = list(sys.meta_path)
    finders: list[Any] = list(before)
    monkeypatch.setattr(sys, "meta_path", finders)
    native.install()
    assert finders[1:] == before  # one finder put first
    for module in native.MODULES:
        spec = finders[0].find_spec(module, None)
        assert spec is not None and spec.origin == str(native.source(module))
    assert finders[0].find_spec("txstream.engine.hops", None) is None


def test_a_current_stamp_lets_the_build_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stamp = tmp_path / "native.json"
    stamp.write_text(json.dumps(native.source_hashes()))
    monkeypatch.setattr(native, "built", lambda: [native.source(native.MODULES[0])])
    monkeypatch.setattr(native, "STAMP", stamp)
    monkeypatch.delenv(native.ENV, raising=False)
    before = list(sys.meta_path)
    finders: list[Any] = list(before)
    monkeypatch.setattr(sys, "meta_path", finders)
    native.install()
    assert native.status().startswith("compiled") and finders == before


def test_importing_txstream_changes_no_interpreter_state() -> None:
    """The guard runs as the venv's interpreters start (make native's `.pth`), not at
    `import txstream`: importing it adds no import hook."""
    code = (
        "import sys; before = list(sys.meta_path); import txstream; print(sys.meta_path == before)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, native.ENV: "0"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
