"""txstream's wheel built from this checkout and installed in a fresh venv, for tests that
run it outside the checkout.

The wheel goes in without its dependencies; the venv borrows this venv's installed packages
through a path entry (not a site directory, so this checkout's editable installs, txstream
and the example apps, are not loaded there): txstream itself comes from the wheel.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def run(argv: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# What the wheel is built from: a copy, since setuptools reuses an in-tree build/lib, which
# keeps whatever an earlier build put there.
SOURCES = ("pyproject.toml", "README.md", "libs", "services", "spark-jobs", "schemas")


def build_wheel(out: Path) -> Path:
    tree = out / "source"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build", "native.json")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tree / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, tree / name)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(tree)],
        cwd=out)  # fmt: skip
    (wheel,) = out.glob("txstream-*.whl")
    return wheel


def venv_with(wheel: Path, venv: Path) -> Path:
    """A fresh venv at `venv` holding `wheel`, its dependencies borrowed; its python."""
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=venv.parent)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         str(wheel)], cwd=venv.parent)  # fmt: skip
    (packages,) = Path(run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                           cwd=venv.parent).strip()).parts[-1:]  # fmt: skip
    site_dir = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / packages
    (site_dir / "borrowed_dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    return python
