"""The wheel works outside the checkout: schemas and alert rules inside, the CLI and the
broker-free test harness running from it.

The wheel is installed without dependencies into a fresh venv that borrows this venv's
installed packages through a path entry (not a site directory, so this checkout's editable
install is not loaded there): txstream itself comes from the wheel.
"""

from __future__ import annotations

import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]


def run(argv: list[str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_holds_the_schemas_and_runs_from_a_fresh_venv(tmp_path: Path) -> None:
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        cwd=tmp_path)  # fmt: skip
    (wheel,) = tmp_path.glob("txstream-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "txstream/avro/txstream.BatchEnvelope.avsc" in names
    assert "txstream/avro/leaderboard/Vote.avsc" in names
    assert "txstream/observability/alerts.yml" in names
    for asset in ("index.html", "console.js", "console.css"):
        assert f"txstream_coordinator/console/static/{asset}" in names
    assert len([n for n in names if n.endswith(".avsc")]) == len(
        list(ROOT.glob("schemas/**/*.avsc"))
    )

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         str(wheel)], cwd=tmp_path)  # fmt: skip
    (packages,) = Path(run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                           cwd=tmp_path).strip()).parts[-1:]  # fmt: skip
    site_dir = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / packages
    (site_dir / "borrowed_dependencies.pth").write_text(site.getsitepackages()[0] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = textwrap.dedent("""
        import txstream
        from txstream.config import Settings
        from txstream.schemas.registry import SchemaRegistry
        from txstream.testing import AppTester
        from leaderboard.dataflow import Params, build_app

        print(txstream.__file__)
        print(Settings().schema_dir)
        SchemaRegistry(Settings().schema_dir).get("leaderboard.Vote")
        t = AppTester(build_app(Params(contestants=2)))
        row = {"contestant_number": 1, "contestant_name": "A", "num_votes": 0}
        t.feed("contestant_rows", [row])
        t.feed("area_code_rows", [{"area_code": 617, "state": "MA"}])
        t.feed("votes", [{"vote_id": 1, "phone_number": 6175550101, "contestant_number": 1}])
        assert t.table("contestants")[(1,)]["num_votes"] == 1
        from txstream_coordinator.console import STATIC
        assert "console.js" in (STATIC / "index.html").read_text()
    """)
    where, schemas = run([str(python), "-c", script], cwd=elsewhere).split()
    assert where.startswith(str(venv)), where
    assert schemas == str(Path(where).parent / "avro"), schemas
    described = run([str(venv / "bin" / "txstream"), "describe", "--app",
                     "leaderboard.dataflow:from_params"], cwd=elsewhere)  # fmt: skip
    assert "votes [leaderboard.Vote]: topic leaderboard.votes" in described
